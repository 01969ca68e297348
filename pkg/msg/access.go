package msg

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Role names a NATS user of weft: one per service (and per part of the
// puller), the auditor, the provisioner and the admin.
type Role string

// The roles. Each has one row in Accesses.
const (
	RoleWatcher          Role = "watcher"
	RoleRenderer         Role = "renderer"
	RoleValidator        Role = "validator"
	RoleDeployer         Role = "deployer"
	RolePullerController Role = "puller-controller"
	RolePullerAgent      Role = "puller-agent"
	RolePullerGate       Role = "puller-gate"
	RoleAuditor          Role = "auditor"
	RoleOperator         Role = "operator"
	RoleProvisioner      Role = "provisioner"
	RoleSiteLink         Role = "site-link"
	RoleAdmin            Role = "admin"
)

// Consumer is a durable consumer a role creates (or updates, after it was
// lost) and takes messages from. Name "*" stands for a family of names
// made at run time (one per replica, instance or node); NATS wildcards
// match whole tokens only, so such a role may create any consumer name on
// the stream with those filters.
type Consumer struct {
	Stream  string
	Name    string
	Filters []string // none: the whole stream
	Delete  bool     // the role removes such consumers too
	List    bool     // the role lists the stream's consumers
}

// KVWrite is a bucket a role writes (put, create, update, delete) under the
// given key patterns (NATS wildcards over the dot-separated key).
type KVWrite struct {
	Bucket string
	Keys   []string
}

// Access is what a role does on NATS. The permissions of its user are
// generated from it (Permissions), and nothing else grants any.
type Access struct {
	Role Role
	What string // who runs with it
	// Publish: subjects it publishes to, core or JetStream (the stream's
	// acknowledgement comes back on its inbox).
	Publish []string
	// Subscribe: core subjects it listens on without answering.
	Subscribe []string
	// Serve: request subjects it answers; it may answer only requests it
	// received, on their reply subjects (NATS allow_responses).
	Serve []string
	// Request: request subjects it asks; replies come on its inbox.
	Request []string
	// Streams it looks up and reads single messages of (the last message
	// of a subject).
	Streams []string
	// Read: streams it reads from any point with ordered push consumers
	// (generated names, no acknowledgements), as it reads buckets: it looks
	// the stream up, gets single messages, creates such consumers and
	// deletes them when done.
	Read      []string
	Consumers []Consumer
	// KVRead: buckets it reads (get, history of a key, watch, list keys).
	KVRead  []string
	KVWrite []KVWrite // implies reading the bucket
	// ObjectRead: object stores it reads; ObjectWrite: stores it puts
	// objects into (implies reading).
	ObjectRead  []string
	ObjectWrite []string
	// Provision: creates and updates every stream, bucket and store.
	Provision bool
	// All: every subject of the account (the all-in-one weft up).
	All bool
	// Link: the connection of a site's leaf node to the hub, carrying
	// JetStream's sourcing between the domains and nothing else (the
	// user's permissions apply to the leaf connection; SiteLink).
	Link bool
}

// configFollower is what every process following a configuration file or
// the active configuration does (pkg/svc/liveconfig): it stores a
// candidate in the object store, asks the template kind about it, keeps
// the verdict under the status key "config", and reads the config bucket.
var configFollower = Access{
	Request:     []string{ValidateSubject(ConfigTarget)},
	KVRead:      []string{BucketConfig},
	KVWrite:     []KVWrite{{BucketStatus, []string{ConfigStatusKey}}},
	ObjectWrite: []string{ObjectBundles},
}

// Accesses is the table of every role: the permissions of every weft NATS
// user are generated from it (Permissions, ServerConfig), and the README's
// "Securing NATS" section shows it.
func Accesses() []Access {
	return []Access{
		merge(Access{
			Role: RoleWatcher, What: "weft-watcher: writes watched objects, announces them, answers fetches and resync triggers; with --config-map, activates configurations; writes the Gateway API status of accepted bundles (it reads the status bucket and the bundles as a configuration follower)",
			Publish:   []string{ChangeAll, SyncAll, DLQSubject("watcher")},
			Serve:     []string{FetchSubject("*"), TriggerResyncAll},
			Consumers: []Consumer{{Stream: KVStream(BucketResources), Name: "watcher-relay"}},
			KVWrite: []KVWrite{
				{BucketResources, []string{">"}},
				{BucketStatus, []string{SyncStatusKey("*", "*")}},
				{BucketConfig, []string{ConfigKey}},
				{BucketLeases, []string{IngressStatusLeaseKey("*"), GatewayStatusLeaseKey("*")}},
			},
		}, configFollower),
		merge(Access{
			Role: RoleRenderer, What: "weft-renderer: follows changes, renders bundles into the object store, publishes renders; its admission webhook asks the validator kinds about dry runs",
			Publish:   []string{RenderAll, DLQSubject("renderer")},
			Serve:     []string{TriggerRenderAll},
			Request:   []string{FetchSubject("*"), ValidateAll},
			Streams:   []string{StreamRenders, StreamChanges},
			Consumers: []Consumer{{Stream: StreamChanges, Name: "*", Filters: []string{ChangeAll, SyncAll}, Delete: true}},
			KVRead:    []string{BucketResources},
			KVWrite: []KVWrite{
				{BucketStatus, []string{RenderStatusKey("*")}},
				{BucketLeases, []string{RenderLeaseKey("*")}},
			},
		}, configFollower),
		merge(Access{
			Role: RoleValidator, What: "weft-validator: answers validation requests per kind, gathers verdicts on renders, publishes them",
			Publish:    []string{ValidatedAll, DLQSubject("validator")},
			Serve:      []string{ValidateAll},
			Request:    []string{ValidateAll},
			Consumers:  []Consumer{{Stream: StreamRenders, Name: "validator", Filters: []string{RenderAll}}},
			KVRead:     []string{BucketStatus},
			ObjectRead: []string{ObjectBundles},
			KVWrite: []KVWrite{
				{BucketStatus, []string{ValidationStatusKey("*")}},
				{BucketLeases, []string{KindHeartbeatPrefix + ">"}},
				{BucketVerdicts, []string{">"}},
			},
		}, configFollower),
		merge(Access{
			Role: RoleDeployer, What: "weft-deployer: turns accepted verdicts into deploy orders, carries them out, answers status requests and deploy triggers",
			Publish:   []string{DeployAll, DeployedAll, DLQSubject("deployer")},
			Subscribe: []string{DeployAll},
			Serve:     []string{TriggerDeployAll, APIStatus, APIHistoryAll, APIDiffAll, APIRollbackAll, APIUnpinAll},
			Streams:   []string{StreamDeploys},
			Consumers: []Consumer{
				{Stream: StreamValidated, Name: "deployer-orders", Filters: []string{ValidatedAll}},
				{Stream: StreamDeploys, Name: "*", Filters: []string{DeployAll}, Delete: true, List: true},
			},
			KVRead:     []string{BucketResources, BucketStatus},
			ObjectRead: []string{ObjectBundles},
			KVWrite: []KVWrite{
				{BucketStatus, []string{DeployStatusKey("*", "*"), PinKey("*"), CanaryKey("*")}},
				{BucketLeases, []string{DeployLeaseKey("*", "*"), HistoryPruneLease, CanaryLeaseKey("*")}},
				{BucketHistory, []string{">"}},
			},
		}, configFollower),
		merge(Access{
			Role: RolePullerController, What: "weft-puller controller: follows the changes of its watched types and the pull outcomes, publishes pull orders, keeps the pulls bucket and the slots of pull Jobs",
			Publish: []string{PullAll, DLQSubject(string(RolePullerController))},
			Consumers: []Consumer{
				// Several filter subjects (one per watched type): created without a filter in the subject.
				{Stream: StreamChanges, Name: "puller-changes", Filters: []string{ChangeAll, SyncAll}},
				{Stream: StreamPulled, Name: "puller-pulled", Filters: []string{PulledAll}},
			},
			KVRead: []string{BucketResources},
			KVWrite: []KVWrite{
				{BucketPulls, []string{">"}},
				{BucketLeases, []string{"slot.>"}},
			},
		}, configFollower),
		merge(Access{
			Role: RolePullerGate, What: "weft-puller gate: reads policies, workloads, PrePullImages and gated pods from the resources bucket to gate new pods and release them",
			KVRead: []string{BucketResources},
		}, configFollower),
		{
			Role: RolePullerAgent, What: "weft-puller agent: takes its node's pull orders, records and publishes their outcomes, holds the slots of the limits its pulls run under",
			Publish:   []string{PulledAll, DLQSubject(string(RolePullerAgent))},
			Consumers: []Consumer{{Stream: StreamPulls, Name: "*", Filters: []string{join("pull", "*")}}},
			KVWrite:   []KVWrite{{BucketPulls, []string{">"}}, {BucketLeases, []string{"slot.>"}}},
		},
		{
			Role: RoleAuditor, What: "people and tools that watch: nats sub 'weft.>', weft status, audit, why, history, diff; publishes nothing but the read-only history and diff queries",
			Subscribe: []string{AllSubjects},
			Read:      []string{StreamChanges, StreamRenders, StreamValidated, StreamDeploys, StreamDLQ},
			Request:   []string{APIHistoryAll, APIDiffAll},
			KVRead:    []string{BucketStatus, BucketPulls, BucketHistory},
		},
		{
			Role: RoleOperator, What: "people who steer deploys: weft status, history, diff, rollback, unpin; re-render and re-deploy triggers",
			Request: []string{APIStatus, APIHistoryAll, APIDiffAll, APIRollbackAll, APIUnpinAll, TriggerRenderAll, TriggerDeployAll},
			KVRead:  []string{BucketStatus, BucketHistory},
		},
		{
			Role: RoleProvisioner, What: "weft provision: creates and updates every stream, bucket and store, once per deployment and upgrade",
			Provision: true,
		},
		{
			Role: RoleSiteLink, What: "a site's NATS leaf node dialing the hub (a user of connection type LEAFNODE): JetStream's sourcing across the link",
			Link: true,
		},
		{
			Role: RoleAdmin, What: "weft up (every service and provisioning in one process), operators with the NATS CLI",
			All: true,
		},
	}
}

// AccessOf returns the row of role.
func AccessOf(role Role) (Access, error) {
	for _, a := range Accesses() {
		if a.Role == role {
			return a, nil
		}
	}
	return Access{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownRole, role, strings.Join(roleNames(), ", "))
}

// Roles lists every role in table order.
func Roles() []Role {
	var out []Role
	for _, a := range Accesses() {
		out = append(out, a.Role)
	}
	return out
}

func roleNames() []string {
	var out []string
	for _, r := range Roles() {
		out = append(out, string(r))
	}
	return out
}

// merge adds b's grants to a.
func merge(a, b Access) Access {
	a.Publish = append(a.Publish, b.Publish...)
	a.Subscribe = append(a.Subscribe, b.Subscribe...)
	a.Serve = append(a.Serve, b.Serve...)
	a.Request = append(a.Request, b.Request...)
	a.Streams = append(a.Streams, b.Streams...)
	a.Read = append(a.Read, b.Read...)
	a.Consumers = append(a.Consumers, b.Consumers...)
	a.KVRead = append(a.KVRead, b.KVRead...)
	for _, w := range b.KVWrite {
		if i := slices.IndexFunc(a.KVWrite, func(x KVWrite) bool { return x.Bucket == w.Bucket }); i >= 0 {
			a.KVWrite[i].Keys = append(slices.Clone(a.KVWrite[i].Keys), w.Keys...)
			continue
		}
		a.KVWrite = append(a.KVWrite, w)
	}
	a.ObjectRead = append(a.ObjectRead, b.ObjectRead...)
	a.ObjectWrite = append(a.ObjectWrite, b.ObjectWrite...)
	return a
}

// ErrUnknownRole reports a role the table does not have.
var ErrUnknownRole = errors.New("unknown NATS role")

// Permissions are the allow lists of a NATS user. Everything not allowed
// is refused by the server.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// Responses: how many answers the user may publish to the reply
	// subject of each request it received (NATS allow_responses); 0: none
	// beyond Publish.
	Responses int
}

// ResponsesPerRequest bounds the answers to one request received: a
// validator replica serves each of its kinds (four today) on one
// connection, and each answers the same validation request.
const ResponsesPerRequest = 8

// JetStream API and reply subjects the permissions are made of (the NATS
// JetStream wire API; nats.go's jetstream and legacy JetStream packages).
const (
	jsAPI = "$JS.API."
	// Inbox is where every reply comes: JetStream API answers, publish
	// acknowledgements, pulled messages, request replies.
	Inbox = "_INBOX.>"
)

// Permissions generates the exact allow lists of role's user.
func (a Access) Permissions() Permissions {
	if a.All {
		return Permissions{Publish: []string{">"}, Subscribe: []string{">"}}
	}
	if a.Link {
		return siteLinkPermissions()
	}
	var p Permissions
	pub := func(s ...string) { p.Publish = append(p.Publish, s...) }
	sub := func(s ...string) { p.Subscribe = append(p.Subscribe, s...) }
	if a.Provision {
		for _, s := range provisionedStreams() {
			pub(jsAPI+"STREAM.CREATE."+s, jsAPI+"STREAM.UPDATE."+s, jsAPI+"STREAM.INFO."+s)
		}
	}
	pub(a.Publish...)
	sub(a.Subscribe...)
	sub(a.Serve...)
	if len(a.Serve) > 0 {
		p.Responses = ResponsesPerRequest
	}
	pub(a.Request...)
	for _, s := range a.Streams {
		pub(jsAPI+"STREAM.INFO."+s, jsAPI+"STREAM.MSG.GET."+s)
	}
	for _, s := range a.Read {
		pub(readStream(s, AllSubjects)...)
	}
	for _, c := range a.Consumers {
		pub(consumerSubjects(c)...)
	}
	readKV := slices.Clone(a.KVRead)
	for _, w := range a.KVWrite {
		readKV = append(readKV, w.Bucket)
		for _, k := range w.Keys {
			pub("$KV." + w.Bucket + "." + k)
		}
	}
	for _, b := range readKV {
		pub(readStream(KVStream(b), "$KV."+b+".>")...)
	}
	readObj := slices.Clone(a.ObjectRead)
	for _, o := range a.ObjectWrite {
		readObj = append(readObj, o)
		// Chunks and the description; putting a name again purges the
		// chunks of the object it replaces.
		pub("$O."+o+".C.>", "$O."+o+".M.>", jsAPI+"STREAM.PURGE."+ObjectStream(o))
	}
	for _, o := range readObj {
		pub(readStream(ObjectStream(o), "$O."+o+".>")...)
	}
	// Every role gets answers: from JetStream, from the requests it makes.
	sub(Inbox)
	p.Publish = dedup(p.Publish)
	p.Subscribe = dedup(p.Subscribe)
	return p
}

// consumerSubjects are the API subjects of one durable consumer: create or
// update (nats.go puts the filter in the subject when there is exactly
// one), look up, take the next messages, acknowledge, and delete or list.
func consumerSubjects(c Consumer) []string {
	s, n := c.Stream, c.Name
	var out []string
	if len(c.Filters) == 1 {
		out = append(out, jsAPI+"CONSUMER.CREATE."+s+"."+n+"."+c.Filters[0])
	} else {
		out = append(out, jsAPI+"CONSUMER.CREATE."+s+"."+n)
	}
	out = append(out,
		jsAPI+"CONSUMER.INFO."+s+"."+n,
		jsAPI+"CONSUMER.MSG.NEXT."+s+"."+n,
		"$JS.ACK."+s+"."+n+".>",
	)
	if c.Delete {
		out = append(out, jsAPI+"CONSUMER.DELETE."+s+"."+n)
	}
	if c.List {
		out = append(out, jsAPI+"CONSUMER.LIST."+s)
	}
	return out
}

// readStream are the subjects of reading the stream of a bucket or store
// whose subjects are under prefix: look it up, get one message (a key's
// last value, an object's description), and ordered consumers (watches,
// key listings, an object's chunks, a read of the whole stream): created
// without a name, or with a generated one and the filter in the subject
// or no filter, removed when done, and their flow control replies.
//
// Generated names leave no token to pin: a reader of a bucket may create
// and delete any consumer of the bucket's stream (the relay's durable on
// the resources bucket among them; the relay renews it). It reads no
// other stream and writes nothing with it.
func readStream(stream, prefix string) []string {
	return []string{
		jsAPI + "STREAM.INFO." + stream,
		jsAPI + "STREAM.MSG.GET." + stream,
		jsAPI + "CONSUMER.CREATE." + stream,
		jsAPI + "CONSUMER.CREATE." + stream + ".*",
		jsAPI + "CONSUMER.CREATE." + stream + ".*." + prefix,
		jsAPI + "CONSUMER.DELETE." + stream + ".*",
		"$JS.FC." + stream + ".>",
	}
}

// provisionedStreams names every stream Provision creates.
func provisionedStreams() []string {
	var out []string
	for _, s := range streamDefs {
		out = append(out, s.name)
	}
	for _, c := range KeyValues(1) {
		out = append(out, KVStream(c.Bucket))
	}
	for _, c := range ObjectStores(1) {
		out = append(out, ObjectStream(c.Bucket))
	}
	return out
}

// ObjectStream is the stream that holds object store name.
func ObjectStream(name string) string { return "OBJ_" + name }

func dedup(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// AccessMarkdown renders Accesses as a Markdown table, one row per role;
// the README's is generated from it and a test keeps them equal.
func AccessMarkdown() string {
	var b strings.Builder
	b.WriteString("| role | who | publishes | subscribes, answers (→) | asks | consumes (stream: consumer) | reads | writes |\n|---|---|---|---|---|---|---|---|\n")
	code := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return "`" + strings.Join(s, "`, `") + "`"
	}
	for _, a := range Accesses() {
		if a.All {
			fmt.Fprintf(&b, "| %s | %s | everything | everything | | | | everything |\n", a.Role, a.What)
			continue
		}
		if a.Provision {
			fmt.Fprintf(&b, "| %s | %s | | | | | | creates and updates every stream, bucket and object store |\n", a.Role, a.What)
			continue
		}
		if a.Link {
			fmt.Fprintf(&b, "| %s | %s | to the hub: the creation of the consumers a site sources through (%s), their deliveries and flow control | from the hub: consumer requests to a site's domain, their deliveries and flow control | | | | |\n", a.Role, a.What, "`"+strings.Join(siteSourcedStreams(true), "`, `")+"`")
			continue
		}
		subs := slices.Clone(a.Subscribe)
		for _, s := range a.Serve {
			subs = append(subs, "→ "+s)
		}
		var cons []string
		for _, c := range a.Consumers {
			cons = append(cons, c.Stream+": "+c.Name)
		}
		reads := slices.Clone(a.Read)
		reads = append(reads, a.KVRead...)
		reads = append(reads, a.ObjectRead...)
		var writes []string
		for _, w := range a.KVWrite {
			for _, k := range w.Keys {
				writes = append(writes, w.Bucket+" "+k)
			}
		}
		writes = append(writes, a.ObjectWrite...)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", a.Role, a.What,
			code(a.Publish), code(subs), code(a.Request), code(cons), code(dedup(reads)), code(writes))
	}
	return b.String()
}
