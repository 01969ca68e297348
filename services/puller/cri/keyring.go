package cri

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// Auth is one set of registry credentials, as the CRI takes them.
type Auth struct {
	Username, Password string
	// Auth is base64("username:password"), as docker config files hold it.
	Auth          string
	ServerAddress string
	IdentityToken string
	RegistryToken string
	// Secret names the pull secret ("namespace/name") the credentials
	// come from: what messages say instead of the credentials.
	Secret string
}

// ErrBadSecret: a pull secret that holds no docker configuration the
// kubelet would read.
var ErrBadSecret = errors.New("not a usable image pull secret")

// Keyring holds the credentials of pull secrets by registry location and
// finds those of an image the way the kubelet's keyring does: a location
// is a host (globs allowed per dot-separated part: *.example.com), an
// optional port that must be equal, and an optional path that the image's
// repository must start with; every matching location counts, the most
// specific (longest) first; an image of the default registry (docker.io)
// also takes the credentials of index.docker.io.
type Keyring struct {
	index []string          // locations, reverse-sorted: most specific first
	creds map[string][]Auth // by location, in the order added
}

// defaultRegistry is where the kubelet files credentials for Docker Hub.
const defaultRegistry = "index.docker.io"

// AddSecret adds the credentials of a pull secret: its
// .dockerconfigjson when it is of type kubernetes.io/dockerconfigjson, or
// its .dockercfg when of type kubernetes.io/dockercfg, as the kubelet reads
// them. Errors name the secret and never show its content.
func (k *Keyring) AddSecret(s *corev1.Secret) error {
	from := s.Namespace + "/" + s.Name
	var entries map[string]configEntry
	switch {
	case s.Type == corev1.SecretTypeDockerConfigJson && len(s.Data[corev1.DockerConfigJsonKey]) > 0:
		var cfg struct {
			Auths map[string]configEntry `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			return fmt.Errorf("%w: secret %s: %s is not a docker config: %s", ErrBadSecret, from, corev1.DockerConfigJsonKey, jsonProblem(err))
		}
		entries = cfg.Auths
	case s.Type == corev1.SecretTypeDockercfg && len(s.Data[corev1.DockerConfigKey]) > 0:
		if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &entries); err != nil {
			return fmt.Errorf("%w: secret %s: %s is not a docker config: %s", ErrBadSecret, from, corev1.DockerConfigKey, jsonProblem(err))
		}
	default:
		return fmt.Errorf("%w: secret %s is of type %q; a pull secret is of type %s (key %s) or %s (key %s), with that key set",
			ErrBadSecret, from, s.Type, corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey, corev1.SecretTypeDockercfg, corev1.DockerConfigKey)
	}
	locs := make([]string, 0, len(entries))
	for loc := range entries {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	for _, loc := range locs {
		a, err := entries[loc].auth()
		if err != nil {
			return fmt.Errorf("%w: secret %s: registry %q: %v", ErrBadSecret, from, loc, err)
		}
		a.Secret = from
		k.add(loc, a)
	}
	return nil
}

// jsonProblem describes a JSON error without quoting the input.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("field %q has the wrong type", typ.Field)
	}
	return "not JSON"
}

// configEntry is one registry's entry of a docker config.
type configEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// auth reads the entry as the kubelet does: "auth", when set, is
// base64("username:password") and wins over the separate fields.
func (e configEntry) auth() (Auth, error) {
	a := Auth{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
	if e.Auth == "" {
		return a, nil
	}
	raw, err := base64.StdEncoding.DecodeString(e.Auth)
	if err != nil {
		return Auth{}, errors.New(`"auth" is not base64`)
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return Auth{}, errors.New(`"auth" is not base64 of "username:password"`)
	}
	a.Username, a.Password = user, strings.Trim(pass, "\x00")
	return a, nil
}

// add files a under the location loc names: scheme and a trailing /v1/ or
// /v2/ dropped, host (with port) and path kept.
func (k *Keyring) add(loc string, a Auth) {
	value := loc
	if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
		value = "https://" + value
	}
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		return // the kubelet skips such a location too
	}
	p := u.Path
	if strings.HasSuffix(p, "/v2/") || strings.HasSuffix(p, "/v1/") {
		p = p[:len(p)-4]
	}
	key := u.Host
	if p != "" && p != "/" {
		key += p
	}
	if k.creds == nil {
		k.creds = map[string][]Auth{}
	}
	if _, ok := k.creds[key]; !ok {
		k.index = append(k.index, key)
		sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
	}
	// No ServerAddress, as the kubelet: the runtime uses the credentials
	// for the host it pulls the image from.
	k.creds[key] = append(k.creds[key], a)
}

// Lookup returns the credentials for image, most specific location first,
// and whether there are any.
func (k *Keyring) Lookup(image string) ([]Auth, bool, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %q: %v", ErrInvalidReference, image, err)
	}
	repo := named.Name() // docker.io/library/nginx, registry:5000/team/app
	var out []Auth
	for _, loc := range k.index {
		if locationMatches(loc, repo) {
			out = append(out, k.creds[loc]...)
		}
	}
	if len(out) > 0 {
		return out, true, nil
	}
	if defaultRegistryImage(repo) {
		if a, ok := k.creds[defaultRegistry]; ok {
			return slices.Clone(a), true, nil
		}
	}
	return nil, false, nil
}

// locationMatches: host parts match as globs one by one, ports are equal,
// and the repository starts with the location's path.
func locationMatches(loc, repo string) bool {
	glob, err1 := url.Parse("https://" + loc)
	target, err2 := url.Parse("https://" + repo)
	if err1 != nil || err2 != nil {
		return false
	}
	gHost, gPort := splitHost(glob.Host)
	tHost, tPort := splitHost(target.Host)
	if gPort != tPort || len(gHost) != len(tHost) {
		return false
	}
	for i := range gHost {
		if ok, _ := filepath.Match(gHost[i], tHost[i]); !ok {
			return false
		}
	}
	return strings.HasPrefix(target.Path, glob.Path)
}

func splitHost(hostport string) ([]string, string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// defaultRegistryImage: a repository of Docker Hub, where credentials
// filed under index.docker.io apply.
func defaultRegistryImage(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	if first == "" {
		return false
	}
	if !found || first == "docker.io" || first == defaultRegistry {
		return true
	}
	return !strings.ContainsAny(first, ".:") && first != "localhost"
}

// RegistryHost is the registry host image is pulled from, as a limit per
// registry names it: the reference's host and port, lower-cased (hosts are
// case-insensitive), and for Docker Hub (no host, docker.io or
// index.docker.io) index.docker.io, where the keyring files its
// credentials: every name of one registry is one host.
func RegistryHost(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidReference, image, err)
	}
	host := strings.ToLower(reference.Domain(named))
	if host == "docker.io" {
		host = defaultRegistry
	}
	return host, nil
}
