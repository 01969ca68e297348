// Package config loads weft.yaml: the sources to watch, the watched resource
// types and how they are indexed, and the targets to render, validate and
// deploy. Load applies defaults, resolves relative paths against the file's
// folder and reports every problem at once (Problems), in file order, each
// an *Error naming the file, line, column and field path; an unknown field
// is reported with the closest known name, and an empty file is a problem. A
// target that names a confd confdir (confd: {dir, prefix}) is replaced at
// load by one target per template resource of the confdir (see Confd), so
// the confdir is read, with package confdir, wherever weft.yaml is loaded.
// A Config is immutable once loaded; services receive the parts they need.
package config

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config/confdir"
	"github.com/weftio/weft/pkg/config/fieldpath"
	"github.com/weftio/weft/pkg/msg"
)

// ErrInvalid wraps every configuration problem.
var ErrInvalid = errors.New("invalid configuration")

// Config is a loaded weft.yaml.
type Config struct {
	// Sources are where state comes from.
	Sources []Source `json:"sources"`
	// WatchedResourcesIgnoreFields are stripped from every object before it
	// is stored (default: metadata.managedFields).
	WatchedResourcesIgnoreFields []string `json:"watched_resources_ignore_fields"`
	// WatchedResources are the object types templates see, by type name.
	WatchedResources map[string]Resource `json:"watched_resources"`
	// Targets are the outputs, by name.
	Targets map[string]Target `json:"targets"`
	// Puller configures the puller's controller (nil: not used).
	Puller *Puller `json:"puller,omitempty"`
	// Sites are the places whose instances are reached only through a
	// NATS leaf node, each the JetStream domain of its leaf node; a target
	// names its site in deploy.site. HubDomain is the JetStream domain of
	// the hub's NATS (default msg.DefaultHubDomain).
	Sites     []string `json:"sites,omitempty"`
	HubDomain string   `json:"hub_domain,omitempty"`
	// History is how many bundles of each target are kept, and how long
	// (default keep 20, max_age 168h); a target may override it.
	History *History `json:"history,omitempty"`
	// ValidationWebhook tunes the validating admission webhook that the
	// watched types with enable_validation_webhook go through.
	ValidationWebhook ValidationWebhook `json:"validation_webhook,omitempty"`

	// The seed form (see expandSeed): haproxy-template-ic's controller
	// configuration, read as it is written.
	PodSelector      *PodSelector        `json:"pod_selector,omitempty"`
	Controller       *Controller         `json:"controller,omitempty"`
	Logging          *Logging            `json:"logging,omitempty"`
	Validation       *SeedValidation     `json:"validation,omitempty"`
	TemplateSnippets map[string]Template `json:"template_snippets,omitempty"`
	Maps             map[string]Template `json:"maps,omitempty"`
	Files            map[string]Template `json:"files,omitempty"`
	HAProxyConfig    *Template           `json:"haproxy_config,omitempty"`

	// Dir is the folder of the file; relative paths were resolved against it.
	Dir string `json:"-"`
	// Hash identifies the file's content.
	Hash string `json:"-"`
}

// Source kinds. Object sources (manifests, kubernetes) provide the watched
// resource types; value sources (configmap-exports and the key-value
// backends) provide named values, stored as objects of the reserved type
// ValuesType and seen by templates as values.<name>.
const (
	SourceManifests  = "manifests"
	SourceKubernetes = "kubernetes"
	SourceExports    = "configmap-exports"
	SourceNATSKV     = "natskv"
	SourceEnv        = "env"
	SourceFile       = "file"
	SourceEtcd       = "etcd"
	SourceRedis      = "redis"
	SourceConsul     = "consul"
	SourceZookeeper  = "zookeeper"
)

// ValuesType is the reserved resource type under which value sources store
// their values.
const ValuesType = "values"

// Source is one place state comes from. Which fields apply depends on Type.
type Source struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// manifests: the folder; file: the YAML/JSON file.
	Path string `json:"path,omitempty"`
	// Rescan is the safety-net full re-read (manifests, file, key-value
	// backends that cannot watch); Resync the periodic full re-list of a
	// kubernetes source. Defaults: 30s and 10m.
	Rescan Duration `json:"rescan,omitempty"`
	Resync Duration `json:"resync,omitempty"`
	// Poll makes a key-value source read everything every Rescan and
	// follow no change in between (confd without -watch); without it the
	// source follows changes as they happen wherever its backend can.
	Poll bool `json:"poll,omitempty"`
	// kubernetes, configmap-exports: a kubeconfig (empty: in-cluster, or
	// $KUBECONFIG) and an optional context.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// configmap-exports: what to export.
	Exports []Export `json:"exports,omitempty"`
	// Key-value backends, as in confd: Prefix is prepended to every key,
	// Keys limits what is read (empty: everything under Prefix).
	Prefix string   `json:"prefix,omitempty"`
	Keys   []string `json:"keys,omitempty"`
	// natskv: the bucket. etcd, zookeeper: Endpoints. redis: Address,
	// Database. consul: Address (default 127.0.0.1:8500), Datacenter.
	Bucket     string   `json:"bucket,omitempty"`
	Endpoints  []string `json:"endpoints,omitempty"`
	Address    string   `json:"address,omitempty"`
	Database   int      `json:"database,omitempty"`
	Datacenter string   `json:"datacenter,omitempty"`
	// Username and the password from PasswordEnv (the name of an
	// environment variable) or PasswordFile (a file holding it); secrets
	// never sit in weft.yaml. zookeeper uses them as digest credentials.
	Username     string `json:"username,omitempty"`
	PasswordEnv  string `json:"password_env,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
	// consul: the ACL token, from an environment variable or a file.
	TokenEnv  string `json:"token_env,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
	// consul: catalog services whose healthy instances become values.
	Services []string `json:"services,omitempty"`
}

// Export reads keys of one ConfigMap (config-reader).
type Export struct {
	ConfigMap string      `json:"configmap"` // "<namespace>/<name>"
	Keys      []ExportKey `json:"keys"`
}

// ExportKey exports one key, renamed with As (default: the key).
type ExportKey struct {
	Key string `json:"key"`
	As  string `json:"as,omitempty"`
}

// Name is the value name an exported key has in templates.
func (k ExportKey) Name() string {
	if k.As != "" {
		return k.As
	}
	return k.Key
}

// ObjectSource reports whether the source provides watched resource types
// (rather than values).
func (s Source) ObjectSource() bool { return s.Type == SourceManifests || s.Type == SourceKubernetes }

// Types returns the resource types the source provides.
func (c *Config) SourceTypes(s Source) []string {
	if s.ObjectSource() {
		return c.ResourceTypes()
	}
	return []string{ValuesType}
}

// Resource is one watched object type.
type Resource struct {
	APIVersion string   `json:"api_version"`
	Kind       string   `json:"kind"`
	IndexBy    []string `json:"index_by,omitempty"`
	// Kubernetes sources: where and what to watch (empty: everything).
	Namespace     string `json:"namespace,omitempty"`
	LabelSelector string `json:"label_selector,omitempty"`
	FieldSelector string `json:"field_selector,omitempty"`
	// Store is "full" (the object is kept in the bucket) or "on-demand"
	// (only metadata is kept; templates fetch the body when they ask).
	Store string `json:"store,omitempty"`
	// EnableValidationWebhook sends creates and updates of objects of this
	// type through the renderer's validating admission webhook: each is
	// rendered in a dry run with the proposed object in place and refused
	// when a target's bundle would be refused. Needs store: full.
	EnableValidationWebhook bool `json:"enable_validation_webhook,omitempty"`
}

// Failure policies of the validating admission webhook.
const (
	FailurePolicyFail   = "fail"
	FailurePolicyIgnore = "ignore"
)

// Defaults of ValidationWebhook.
const (
	DefaultWebhookTimeout = 5 * time.Second
	// MaxWebhookTimeout is below the API server's default timeoutSeconds
	// (10): an answer must leave the webhook before the API server gives up.
	MaxWebhookTimeout = 9 * time.Second
)

// ValidationWebhook tunes the validating admission webhook.
type ValidationWebhook struct {
	// Timeout bounds a dry run (render and validation); when weft cannot
	// decide within it, FailurePolicy answers (default 5s, at most 9s).
	Timeout Duration `json:"timeout,omitempty"`
	// FailurePolicy is fail (refuse what cannot be decided, the default)
	// or ignore (admit it); the generated ValidatingWebhookConfiguration
	// carries it as failurePolicy, for when the webhook cannot be reached.
	FailurePolicy string `json:"failure_policy,omitempty"`
}

// Admits reports whether an object the webhook cannot decide on is
// admitted.
func (w ValidationWebhook) Admits() bool { return w.FailurePolicy == FailurePolicyIgnore }

// WebhookTypes returns the watched types with enable_validation_webhook,
// sorted.
func (c *Config) WebhookTypes() []string {
	var out []string
	for _, name := range c.ResourceTypes() {
		if c.WatchedResources[name].EnableValidationWebhook {
			out = append(out, name)
		}
	}
	return out
}

// Template is one template text.
type Template struct {
	Name     string `json:"name,omitempty"`
	Template string `json:"template"`
}

// Target is one rendered output: templates, how it is validated and where it
// is deployed.
type Target struct {
	TemplateSnippets map[string]Template `json:"template_snippets,omitempty"`
	Maps             map[string]Template `json:"maps,omitempty"`
	Files            map[string]Template `json:"files,omitempty"`
	Certificates     map[string]Template `json:"certificates,omitempty"`
	HAProxyConfig    Template            `json:"haproxy_config"`
	// Library names a template set shipped with weft (e.g. "ingress") that
	// provides the template sections; sections the target sets itself
	// replace the library's of the same name.
	Library string `json:"library,omitempty"`
	// LibraryOptions tune the library (see its documentation).
	LibraryOptions map[string]string `json:"library_options,omitempty"`
	// Fragments are templates rendered once per object of a watched type
	// and reused while what they read is unchanged; templates join them
	// with fragments("<name>") or take one with fragment("<name>", id).
	Fragments map[string]Fragment `json:"fragments,omitempty"`
	// Confd makes the target a confd confdir instead of a template set:
	// Load replaces it by one target per template resource (see Confd).
	Confd *Confd `json:"confd,omitempty"`
	// ConfdResource is set on the targets a confd target became: the
	// resource they render (its dest, resolved against weft.yaml's folder).
	ConfdResource *confdir.Spec `json:"-"`

	// Base is the absolute folder the bundle is deployed under, as the
	// running program sees it; get_path() returns paths below it. Default:
	// deploy.dest.
	Base     string   `json:"base,omitempty"`
	Render   Render   `json:"render,omitempty"`
	Validate Validate `json:"validate,omitempty"`
	Deploy   Deploy   `json:"deploy"`
	// History overrides the global history section for this target;
	// after loading, it is always set.
	History *History `json:"history,omitempty"`
	// IngressStatus publishes the instances' addresses on the Ingresses
	// the target serves (see IngressStatus).
	IngressStatus *IngressStatus `json:"ingress_status,omitempty"`
	// GatewayStatus writes the rendered Gateway API status and the
	// instances' addresses to the objects (see GatewayStatus).
	GatewayStatus *GatewayStatus `json:"gateway_status,omitempty"`

	// seed marks the target of the seed form, whose Dataplane API
	// credentials come from the environment (SeedUserEnv).
	seed bool
}

// Fragment is a template rendered for every object of the watched type
// ForEach, with the object as obj and its id as id.
type Fragment struct {
	ForEach  string `json:"for_each"`
	Template string `json:"template"`
}

// Render tunes when a target renders.
type Render struct {
	// Debounce coalesces bursts of changes: the first change of a quiet
	// period renders at once (leading edge) unless Leading is false, and the
	// rest render once, Debounce after the last (trailing edge). Unset, it
	// is DefaultDebounce; 0 renders as soon as the target's previous render
	// is done, with every change since (see Wait).
	Debounce *Duration `json:"debounce,omitempty"`
	Leading  *bool     `json:"leading,omitempty"`
	// MaxWait bounds how long changes that never pause for Debounce can
	// postpone the trailing render (at least Debounce). Unset, it is the
	// debounce: under changes that never pause, the target still renders
	// once per debounce interval (see Bound).
	MaxWait Duration `json:"max_wait,omitempty"`
	// MaxIdle forces a render after this long without one (0: never).
	MaxIdle Duration `json:"max_idle,omitempty"`
}

// LeadingEdge reports whether the first change of a quiet period renders at once.
func (r Render) LeadingEdge() bool { return r.Leading == nil || *r.Leading }

// Wait is the debounce: DefaultDebounce when unset, else as set (0
// included).
func (r Render) Wait() time.Duration {
	if r.Debounce == nil {
		return DefaultDebounce
	}
	return r.Debounce.D()
}

// Bound is the longest a stream of changes can postpone a render: MaxWait,
// or the debounce when MaxWait is unset.
func (r Render) Bound() time.Duration {
	if r.MaxWait > 0 {
		return r.MaxWait.D()
	}
	return r.Wait()
}

// Dur returns a pointer to d, for the optional durations of a
// configuration built in code (Render.Debounce).
func Dur(d time.Duration) *Duration {
	v := Duration(d)
	return &v
}

// Validator kinds.
const (
	KindTemplate = "template"
	KindHAProxy  = "haproxy"
	KindSyntax   = "syntax"
	KindPolicy   = "policy"
)

// Kinds are every validator kind.
var Kinds = []string{KindHAProxy, KindPolicy, KindSyntax, KindTemplate}

// Where the gatherer learns the kinds it expects.
const (
	// ExpectConfigured: the kinds listed in Kinds (default template and
	// haproxy).
	ExpectConfigured = "configured"
	// ExpectRegistered: every kind some validator replica announces with a
	// live heartbeat, plus the kinds listed in Kinds (none by default).
	ExpectRegistered = "registered"
)

// Validate names the validator kinds a bundle must pass.
type Validate struct {
	Kinds []string `json:"kinds,omitempty"`
	// Expect is ExpectConfigured (default) or ExpectRegistered.
	Expect string `json:"expect,omitempty"`
	// MinKinds accepts a bundle when at least this many expected kinds
	// answered before the timeout and all of them accepted (0: every
	// expected kind must answer). Kinds that did not answer are named in
	// the verdict either way.
	MinKinds int      `json:"min_kinds,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
	// Policy holds the rules of the policy kind.
	Policy Policy `json:"policy,omitempty"`
	// Fast (default true) lets the haproxy kind accept a bundle that
	// differs from the last fully accepted one only in runtime values
	// (server addresses, ports, weights and states; map entries;
	// certificates) by checking those values, then confirm it with the
	// whole `haproxy -c` after the verdict; false: every bundle is
	// checked whole before its verdict.
	Fast *bool `json:"fast,omitempty"`
	// ConfirmGap (default 2s) spaces the fast path's whole checks: the
	// next whole check of a target starts no sooner than this after the
	// last one ended, nor sooner than twice that check's length, so that
	// under a stream of changes the background `haproxy -c` takes at most
	// a third of a core and the changes' own path keeps the rest. A
	// bundle pending after a quiet spell is checked at once; a stream of
	// changes has its newest bundle checked once per gap.
	ConfirmGap Duration `json:"confirm_gap,omitempty"`
}

// FastPath reports whether validate.fast is on (the default).
func (v Validate) FastPath() bool { return v.Fast == nil || *v.Fast }

// Deploy drivers.
const (
	DriverFiles     = "files"
	DriverRuntime   = "runtime"
	DriverDataplane = "dataplane"
)

// Drivers are every deploy driver.
var Drivers = []string{DriverDataplane, DriverFiles, DriverRuntime}

// Deploy says where and how a target's bundle is delivered.
type Deploy struct {
	Driver   string `json:"driver"`
	Instance string `json:"instance,omitempty"` // default "local"
	Dest     string `json:"dest"`
	Owner    string `json:"owner,omitempty"`
	Group    string `json:"group,omitempty"`
	Mode     string `json:"mode,omitempty"` // octal, e.g. "0644"
	// KeepMode (a confd resource without mode, as confd does): a file
	// already there keeps its permission bits; a new one gets Mode.
	KeepMode bool `json:"-"`
	// KeepStaged (confd's -keep-stage-file): the files driver leaves a
	// copy of each file it staged beside it, as .<name>.weft-stage.
	KeepStaged        bool     `json:"-"`
	CheckCmd          string   `json:"check_cmd,omitempty"`
	ReloadCmd         string   `json:"reload_cmd,omitempty"`
	MinReloadInterval Duration `json:"min_reload_interval,omitempty"`
	// CmdTimeout bounds check_cmd and reload_cmd (default: the driver's).
	CmdTimeout Duration `json:"cmd_timeout,omitempty"`
	// Name, for the files driver, names its manifest and staging entries
	// in dest, so that targets whose files differ can share a dest.
	Name string `json:"name,omitempty"`
	// runtime driver: HAProxy's master socket (reloads, worker state) and
	// admin socket (Runtime API); HAProxyDir is dest as HAProxy's
	// configuration names it, when it sees the folder at another path.
	MasterSocket string `json:"master_socket,omitempty"`
	AdminSocket  string `json:"admin_socket,omitempty"`
	HAProxyDir   string `json:"haproxy_dir,omitempty"`
	// dataplane driver: the API and its credentials (URL per instance).
	Dataplane Dataplane `json:"dataplane,omitempty"`
	// Pods makes every ready Pod of a watched type an instance (dataplane
	// driver), added and removed as the watcher sees Pods come and go.
	Pods *Pods `json:"pods,omitempty"`
	// Instances deploys the target to several instances in parallel; each
	// takes the fields above and overrides those it sets. Empty: one
	// instance named Instance.
	Instances []Instance `json:"instances,omitempty"`
	// DriftCheck re-applies each instance's bundle this often, which
	// detects and repairs changes made behind weft's back (0: only on
	// weft.trigger.deploy.<target>).
	DriftCheck Duration `json:"drift_check,omitempty"`
	// Site names the site (one of sites) whose deployer delivers the
	// target; empty: the hub's deployer.
	Site string `json:"site,omitempty"`
	// Canary deploys an accepted bundle to some instances first and the
	// rest only after a hold that HAProxy's own view passed (see Canary).
	Canary *Canary `json:"canary,omitempty"`
}

// Dataplane is how the dataplane driver reaches an HAProxy Dataplane API.
type Dataplane struct {
	URL  string `json:"url,omitempty"`
	User string `json:"user,omitempty"`
	// Password, or PasswordFile naming a file that holds it (a mounted
	// Secret); the file wins.
	Password     string `json:"password,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
}

// Pods selects the Pods whose Dataplane APIs a target deploys to.
type Pods struct {
	// Type is a watched resource type of Pods (api_version v1, kind Pod)
	// kept in full: the deployer reads their labels, readiness
	// (status.conditions) and address (status.podIP).
	Type string `json:"type"`
	// LabelSelector filters them (Kubernetes label selector syntax).
	LabelSelector string `json:"label_selector,omitempty"`
	// Port of the Dataplane API in the Pod (default 5555) and Scheme
	// (default http).
	Port   int    `json:"port,omitempty"`
	Scheme string `json:"scheme,omitempty"`
}

// Instance is one program a target is delivered to.
type Instance struct {
	Name         string `json:"name"`
	URL          string `json:"url,omitempty"` // dataplane driver
	Dest         string `json:"dest,omitempty"`
	MasterSocket string `json:"master_socket,omitempty"`
	AdminSocket  string `json:"admin_socket,omitempty"`
	HAProxyDir   string `json:"haproxy_dir,omitempty"`
}

// PerInstance returns one Deploy per instance, named by Instance and
// holding that instance's fields; without Instances, d itself.
func (d Deploy) PerInstance() []Deploy {
	if len(d.Instances) == 0 {
		return []Deploy{d}
	}
	out := make([]Deploy, 0, len(d.Instances))
	for _, in := range d.Instances {
		e := d
		e.Instances = nil
		e.Instance = in.Name
		e.Dest = cmp.Or(in.Dest, d.Dest)
		e.MasterSocket = cmp.Or(in.MasterSocket, d.MasterSocket)
		e.AdminSocket = cmp.Or(in.AdminSocket, d.AdminSocket)
		e.HAProxyDir = cmp.Or(in.HAProxyDir, d.HAProxyDir)
		e.Dataplane.URL = cmp.Or(in.URL, d.Dataplane.URL)
		out = append(out, e)
	}
	return out
}

// FileMode parses Mode (0 when unset).
func (d Deploy) FileMode() (os.FileMode, error) {
	if d.Mode == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(d.Mode, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal file mode", d.Mode)
	}
	return os.FileMode(m), nil
}

// Duration is a time.Duration written as "250ms", "30s", "1m".
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`must be a duration like "250ms", "30s" or "1m30s", got %s`, b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Store modes of a watched resource type.
const (
	StoreFull     = "full"
	StoreOnDemand = "on-demand"
)

// Defaults.
const (
	DefaultResync          = 10 * time.Minute
	DefaultRescan          = 30 * time.Second
	DefaultDebounce        = 100 * time.Millisecond
	DefaultValidateTimeout = 10 * time.Second
	DefaultConfirmGap      = 2 * time.Second
	DefaultInstance        = "local"
)

// Load reads, defaults, resolves and validates a weft.yaml. Its problems
// (Problems, each an *Error wrapping ErrInvalid) name path's line and
// column and the field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseFile(path, data, filepath.Dir(abs))
}

// Parse is Load for content already read; dir resolves relative paths.
// Problems name the file weft.yaml.
func Parse(data []byte, dir string) (*Config, error) {
	return ParseFile("weft.yaml", data, dir)
}

// ParseFile is Parse for content read from file, the name its problems
// give. An empty file (nothing but comments and blank lines) is a problem.
func ParseFile(file string, data []byte, dir string) (*Config, error) {
	ps := &problems{file: file}
	root, perr := parseYAML(file, data)
	switch {
	case perr != nil:
		ps.list = append(ps.list, perr)
		return nil, ps.err()
	case root == nil:
		ps.add(nil, "the configuration is empty: it needs sources, watched_resources and targets")
		return nil, ps.err()
	}
	ps.root = root
	checkShape(ps, root, reflect.TypeFor[Config](), nil)
	if err := ps.err(); err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		// The shape check accepts only what decodes: this is a gap in it.
		ps.add(nil, "%v", err)
		return nil, ps.err()
	}
	sum := sha256.Sum256(data)
	c.Hash = hex.EncodeToString(sum[:8])
	c.Dir = dir
	c.expandSeed(ps)
	c.expandConfd(ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	c.defaults()
	c.check(ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

func (c *Config) defaults() {
	c.pullerDefaults()
	if c.HubDomain == "" {
		c.HubDomain = msg.DefaultHubDomain
	}
	if c.WatchedResourcesIgnoreFields == nil {
		c.WatchedResourcesIgnoreFields = []string{"metadata.managedFields"}
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		s.Path = c.resolve(s.Path)
		if s.Kubeconfig != "" {
			s.Kubeconfig = c.resolve(s.Kubeconfig)
		}
		if s.Rescan == 0 {
			s.Rescan = Duration(DefaultRescan)
		}
		if s.Resync == 0 {
			s.Resync = Duration(DefaultResync)
		}
	}
	if c.ValidationWebhook.Timeout == 0 {
		c.ValidationWebhook.Timeout = Duration(DefaultWebhookTimeout)
	}
	c.ValidationWebhook.FailurePolicy = strings.ToLower(cmp.Or(c.ValidationWebhook.FailurePolicy, FailurePolicyFail))
	for name, r := range c.WatchedResources {
		if r.Store == "" {
			r.Store = StoreFull
		}
		c.WatchedResources[name] = r
	}
	for name, t := range c.Targets {
		t.Deploy.Dest = c.resolve(t.Deploy.Dest)
		t.Deploy.MasterSocket = c.resolve(t.Deploy.MasterSocket)
		t.Deploy.AdminSocket = c.resolve(t.Deploy.AdminSocket)
		t.Deploy.Dataplane.PasswordFile = c.resolve(t.Deploy.Dataplane.PasswordFile)
		if p := t.Deploy.Pods; p != nil {
			q := *p
			q.Port = cmp.Or(q.Port, 5555)
			q.Scheme = cmp.Or(q.Scheme, "http")
			t.Deploy.Pods = &q
		}
		t.Deploy.Instances = slices.Clone(t.Deploy.Instances)
		for i, in := range t.Deploy.Instances {
			in.Dest, in.MasterSocket, in.AdminSocket = c.resolve(in.Dest), c.resolve(in.MasterSocket), c.resolve(in.AdminSocket)
			t.Deploy.Instances[i] = in
		}
		if t.Deploy.Instance == "" {
			t.Deploy.Instance = DefaultInstance
		}
		if c := t.Deploy.Canary; c != nil {
			cc := *c
			cc.Names = slices.Clone(c.Names)
			cc.defaults()
			t.Deploy.Canary = &cc
		}
		if t.Base == "" {
			t.Base = t.Deploy.Dest
		}
		if t.Render.Debounce == nil {
			t.Render.Debounce = Dur(DefaultDebounce)
		}
		if t.Validate.Expect == "" {
			t.Validate.Expect = ExpectConfigured
		}
		if len(t.Validate.Kinds) == 0 && t.Validate.Expect == ExpectConfigured {
			t.Validate.Kinds = []string{KindTemplate, KindHAProxy}
		}
		slices.Sort(t.Validate.Kinds)
		if t.Validate.Timeout == 0 {
			t.Validate.Timeout = Duration(DefaultValidateTimeout)
		}
		if t.Validate.ConfirmGap == 0 {
			t.Validate.ConfirmGap = Duration(DefaultConfirmGap)
		}
		c.ingressStatusDefaults(&t)
		c.gatewayStatusDefaults(&t)
		c.Targets[name] = t
	}
	c.historyDefaults()
}

func (c *Config) check(ps *problems) {
	bad := ps.add
	token := func(p path, s string) {
		if err := msg.ValidToken(s); err != nil {
			bad(p, "%v", err)
		}
	}
	seen := map[string]bool{}
	seenValue := map[string]string{}
	for i, s := range c.Sources {
		f := path{"sources"}.i(i)
		token(f.k("name"), s.Name)
		if seen[s.Name] {
			bad(f.k("name"), "%q is used twice", s.Name)
		}
		seen[s.Name] = true
		if s.Rescan < 0 {
			bad(f.k("rescan"), "must not be negative")
		}
		if s.Resync < 0 {
			bad(f.k("resync"), "must not be negative")
		}
		if s.Poll && (s.ObjectSource() || s.Type == SourceExports) {
			bad(f.k("poll"), "only key-value sources poll; a %s source follows changes", s.Type)
		}
		switch s.Type {
		case SourceManifests, SourceFile:
			if s.Path == "" {
				bad(f.k("path"), "required for a %s source", s.Type)
			}
		case SourceKubernetes, SourceEnv:
		case SourceExports:
			if len(s.Exports) == 0 {
				bad(f.k("exports"), "required for a configmap-exports source")
			}
			for j, e := range s.Exports {
				ef := f.k("exports").i(j)
				if ns, name, ok := strings.Cut(e.ConfigMap, "/"); !ok || ns == "" || name == "" {
					bad(ef.k("configmap"), "must be <namespace>/<name>, got %q", e.ConfigMap)
				}
				if len(e.Keys) == 0 {
					bad(ef.k("keys"), "required")
				}
				for n, k := range e.Keys {
					if k.Key == "" {
						bad(ef.k("keys").i(n).k("key"), "required")
					}
					if seenValue[k.Name()] != "" {
						bad(ef.k("keys").i(n), "value %q is exported twice (also by %s)", k.Name(), seenValue[k.Name()])
					}
					seenValue[k.Name()] = e.ConfigMap
				}
			}
		case SourceNATSKV:
			if s.Bucket == "" {
				bad(f.k("bucket"), "required for a natskv source")
			}
		case SourceEtcd:
			if len(s.Endpoints) == 0 {
				bad(f.k("endpoints"), "required for an etcd source")
			}
		case SourceRedis:
			if s.Address == "" {
				bad(f.k("address"), "required for a redis source")
			}
		case SourceConsul:
			if s.TokenEnv != "" && s.TokenFile != "" {
				bad(f.k("token_file"), "token_env and token_file exclude each other")
			}
			for j, name := range s.Services {
				if name == "" || strings.ContainsAny(name, "/?#") {
					bad(f.k("services").i(j), "not a service name: %q", name)
				}
			}
		case SourceZookeeper:
			if len(s.Endpoints) == 0 {
				bad(f.k("endpoints"), "required for a zookeeper source")
			}
		default:
			bad(f.k("type"), "unknown source type %q (known: %s)", s.Type,
				strings.Join([]string{SourceManifests, SourceKubernetes, SourceExports, SourceNATSKV, SourceEnv, SourceFile, SourceEtcd, SourceRedis, SourceConsul, SourceZookeeper}, ", "))
		}
	}
	for i, expr := range c.WatchedResourcesIgnoreFields {
		if _, err := fieldpath.Parse(expr); err != nil {
			ps.addExpr(path{"watched_resources_ignore_fields"}.i(i), err)
		}
	}
	for _, name := range sortedKeys(c.WatchedResources) {
		r := c.WatchedResources[name]
		f := path{"watched_resources", name}
		token(f, name)
		if name == ValuesType {
			bad(f, "the type name %q is reserved for value sources", ValuesType)
		}
		if r.Store != StoreFull && r.Store != StoreOnDemand {
			bad(f.k("store"), "must be %s or %s, got %q", StoreFull, StoreOnDemand, r.Store)
		}
		if r.APIVersion == "" {
			bad(f.k("api_version"), "required")
		}
		if r.Kind == "" {
			bad(f.k("kind"), "required")
		}
		for i, expr := range r.IndexBy {
			if _, err := fieldpath.Parse(expr); err != nil {
				ps.addExpr(f.k("index_by").i(i), err)
			}
		}
		if _, err := labels.Parse(r.LabelSelector); err != nil {
			bad(f.k("label_selector"), "%v", err)
		}
		if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
			bad(f.k("field_selector"), "%v", err)
		}
		if r.EnableValidationWebhook && r.Store != StoreFull {
			bad(f.k("enable_validation_webhook"), "needs store: %s (a dry run renders the proposed object whole)", StoreFull)
		}
	}
	if w := c.ValidationWebhook; w.Timeout < 0 || w.Timeout.D() > MaxWebhookTimeout {
		bad(path{"validation_webhook", "timeout"}, "must be between 0 and %s (the API server gives up after 10s), got %s", MaxWebhookTimeout, w.Timeout.D())
	}
	if p := c.ValidationWebhook.FailurePolicy; p != FailurePolicyFail && p != FailurePolicyIgnore {
		bad(path{"validation_webhook", "failure_policy"}, "must be %s or %s, got %q", FailurePolicyFail, FailurePolicyIgnore, p)
	}
	c.checkSites(ps)
	checkHistory(ps, path{"history"}, c.History, nil)
	classes, controllers := map[string]string{}, map[string]string{}
	for _, name := range sortedKeys(c.Targets) {
		c.checkTarget(ps, name, c.Targets[name])
		c.checkIngressStatus(ps, name, c.Targets[name], classes)
		c.checkGatewayStatus(ps, name, c.Targets[name], controllers)
	}
	c.checkPuller(ps)
}

// checkTarget reports the problems of one target.
func (c *Config) checkTarget(ps *problems, name string, t Target) {
	bad := ps.add
	f := path{"targets", name}
	if err := msg.ValidToken(name); err != nil {
		bad(f, "%v", err)
	}
	if strings.TrimSpace(t.HAProxyConfig.Template) == "" && t.Library == "" && t.ConfdResource == nil {
		bad(f.k("haproxy_config", "template"), "required")
	}
	switch {
	case t.Base == "" && (t.Deploy.Driver == DriverDataplane || len(t.Deploy.Instances) > 0):
		bad(f.k("base"), "required when deploy has no dest: the folder the bundle is deployed under, as the instances see it")
	case t.Base != "" && !filepath.IsAbs(t.Base):
		bad(f.k("base"), "must be an absolute path, got %q", t.Base)
	}
	for i, k := range t.Validate.Kinds {
		if !slices.Contains(Kinds, k) {
			bad(f.k("validate", "kinds").i(i), "unknown kind %q (known: %s)", k, strings.Join(Kinds, ", "))
		}
	}
	if v := t.Validate.Expect; v != ExpectConfigured && v != ExpectRegistered {
		bad(f.k("validate", "expect"), "must be %s or %s, got %q", ExpectConfigured, ExpectRegistered, v)
	}
	if n := t.Validate.MinKinds; n < 0 || (t.Validate.Expect == ExpectConfigured && n > len(t.Validate.Kinds)) {
		bad(f.k("validate", "min_kinds"), "must be between 0 and the number of kinds (%d), got %d", len(t.Validate.Kinds), n)
	}
	for _, pe := range t.Validate.Policy.problems() {
		bad(append(f.k("validate", "policy"), pe.field...), "%s", pe.msg)
	}
	for _, n := range sortedKeys(t.Fragments) {
		if err := msg.ValidToken(n); err != nil {
			bad(f.k("fragments", n), "%v", err)
		}
		if _, ok := c.WatchedResources[t.Fragments[n].ForEach]; !ok {
			bad(f.k("fragments", n, "for_each"), "%q is not a watched resource type", t.Fragments[n].ForEach)
		}
	}
	for _, group := range []string{"maps", "files", "certificates"} {
		m := map[string]map[string]Template{"maps": t.Maps, "files": t.Files, "certificates": t.Certificates}[group]
		for _, n := range sortedKeys(m) {
			if err := msg.SafePath(n); err != nil || strings.Contains(n, "/") {
				bad(f.k(group, n), "file name must be a plain name")
			}
		}
	}
	checkHistory(ps, f.k("history"), t.History, c.History)
	d := t.Deploy
	checkDeploy(f.k("deploy"), d, t.seed, bad)
	if d.Pods != nil && d.Pods.Type != "" {
		switch r, ok := c.WatchedResources[d.Pods.Type]; {
		case !ok:
			bad(f.k("deploy", "pods", "type"), "%q is not a watched resource type", d.Pods.Type)
		case r.APIVersion != "v1" || r.Kind != "Pod":
			bad(f.k("deploy", "pods", "type"), "%q is %s %s, not Pods (api_version v1, kind Pod)", d.Pods.Type, r.APIVersion, r.Kind)
		case r.Store == StoreOnDemand:
			bad(f.k("deploy", "pods", "type"), "%q is kept on demand, without the status that tells whether a Pod is ready and its address", d.Pods.Type)
		}
	}
	if _, err := d.FileMode(); err != nil {
		bad(f.k("deploy", "mode"), "%v", err)
	}
	if d.Name != "" {
		if err := msg.ValidToken(d.Name); err != nil {
			bad(f.k("deploy", "name"), "%v", err)
		}
	}
	for _, dur := range []struct {
		p path
		d Duration
	}{
		{f.k("deploy", "drift_check"), d.DriftCheck},
		{f.k("deploy", "min_reload_interval"), d.MinReloadInterval},
		{f.k("deploy", "cmd_timeout"), d.CmdTimeout},
		{f.k("render", "debounce"), Duration(t.Render.Wait())},
		{f.k("render", "max_idle"), t.Render.MaxIdle},
		{f.k("render", "max_wait"), t.Render.MaxWait},
		{f.k("validate", "timeout"), t.Validate.Timeout},
		{f.k("validate", "confirm_gap"), t.Validate.ConfirmGap},
	} {
		if dur.d < 0 {
			bad(dur.p, "must not be negative")
		}
	}
	if t.Render.MaxWait > 0 && t.Render.MaxWait.D() < t.Render.Wait() {
		bad(f.k("render", "max_wait"), "%s is shorter than render.debounce %s", t.Render.MaxWait.D(), t.Render.Wait())
	}
}

// checkDeploy reports the problems of a deploy section, instance by
// instance.
func checkDeploy(f path, d Deploy, seed bool, bad func(p path, format string, args ...any)) {
	if !slices.Contains(Drivers, d.Driver) {
		bad(f.k("driver"), "unknown driver %q (known: %s)", d.Driver, strings.Join(Drivers, ", "))
		return
	}
	if d.Pods != nil {
		checkPods(f.k("pods"), d, bad)
	}
	if d.Canary != nil {
		checkCanary(f.k("canary"), d, bad)
	}
	names, dests := map[string]bool{}, map[string]string{}
	for i, in := range d.PerInstance() {
		fi, url := f, f.k("dataplane", "url")
		if len(d.Instances) > 0 {
			fi = f.k("instances").i(i)
			url = fi.k("url")
		}
		if err := msg.ValidToken(in.Instance); err != nil {
			bad(fi.k("name"), "%v", err)
		}
		if names[in.Instance] {
			bad(fi.k("name"), "%q is used twice", in.Instance)
		}
		names[in.Instance] = true
		if d.Driver == DriverDataplane {
			if in.Dataplane.URL == "" && d.Pods == nil {
				bad(url, "required for the dataplane driver (or deploy.pods)")
			}
			continue
		}
		if in.Dest == "" {
			bad(fi.k("dest"), "required for the %s driver", d.Driver)
		} else if other, ok := dests[in.Dest]; ok {
			bad(fi.k("dest"), "%s is also the dest of instance %s", in.Dest, other)
		}
		dests[in.Dest] = in.Instance
		if d.Driver == DriverRuntime && in.MasterSocket == "" {
			bad(fi.k("master_socket"), "required for the runtime driver")
		}
	}
	if d.Driver == DriverDataplane && d.Dataplane.User == "" && !seed {
		bad(f.k("dataplane", "user"), "required for the dataplane driver")
	}
}

func checkPods(f path, d Deploy, bad func(p path, format string, args ...any)) {
	p := d.Pods
	if d.Driver != DriverDataplane {
		bad(f, "pods are instances of the dataplane driver, not %s", d.Driver)
	}
	if p.Type == "" {
		bad(f.k("type"), "required: the watched resource type holding the Pods")
	}
	if p.Port < 0 || p.Port > 65535 {
		bad(f.k("port"), "%d is not a port", p.Port)
	}
	if p.Scheme != "" && p.Scheme != "http" && p.Scheme != "https" {
		bad(f.k("scheme"), "must be http or https, got %q", p.Scheme)
	}
	if _, err := labels.Parse(p.LabelSelector); err != nil {
		bad(f.k("label_selector"), "%v", err)
	}
}

// TargetNames returns the target names in order.
func (c *Config) TargetNames() []string { return sortedKeys(c.Targets) }

// ResourceTypes returns the watched type names in order.
func (c *Config) ResourceTypes() []string { return sortedKeys(c.WatchedResources) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TypeFor returns the watched type name of objects with apiVersion and kind.
func (c *Config) TypeFor(apiVersion, kind string) (string, bool) {
	for name, r := range c.WatchedResources {
		if r.APIVersion == apiVersion && r.Kind == kind {
			return name, true
		}
	}
	return "", false
}

// IgnorePaths returns the parsed watched_resources_ignore_fields (checked
// when the file loaded).
func (c *Config) IgnorePaths() []fieldpath.Path {
	out := make([]fieldpath.Path, 0, len(c.WatchedResourcesIgnoreFields))
	for _, f := range c.WatchedResourcesIgnoreFields {
		if p, err := fieldpath.Parse(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}
