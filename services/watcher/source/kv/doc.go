// Package kv reads confd-style key-value stores as value sources: a NATS KV
// bucket (natskv), the environment (env), a YAML or JSON file (file), etcd v3
// (etcd), Redis (redis), Consul (consul) and ZooKeeper (zookeeper). New
// picks the backend by config.Source.Type and checks its options; every
// configuration problem it finds wraps ErrConfig. Passwords and tokens come
// from a variable (password_env, token_env) or a file (password_file,
// token_file), read when the source is built, never from weft.yaml.
//
// # What a source reports
//
// Each value is reported as an object of type config.ValuesType built with
// source.Value(name, value, extra). extra always holds "key", the key as the
// backend spells it (the KV key, the variable name, the etcd or Redis key, the
// flattened file path), and "source", the backend type; a value from a Redis
// hash also has "field", and a Consul service's value "service". Nothing volatile (revisions, times) is kept, so a
// value that did not change gives the same object.
//
// Run follows the source.Source contract. The first complete read is given
// with Replace and then Synced (with the problems that read found, such as
// keys that cannot be mapped); later changes come as Upsert and Delete, and
// every full re-read comes as a Replace. A full re-read happens every
// src.Rescan (default config.DefaultRescan) whatever the backend: it is the
// safety net against a missed event, and for env the only way to see
// anything. A backend that cannot be reached (server down, bucket or file
// missing, password refused) is reported with sink.Problem, wrapping
// ErrUnavailable, and tried again with exponential backoff (WithBackoff);
// values already reported are kept meanwhile, and a read that fails never
// empties them. Content that cannot be used (a key that has no name, two keys
// giving one name, a file that does not parse) is reported wrapping
// ErrInvalidData. Run returns nil when its context ends, after stopping
// every goroutine it started; it returns an error only when it cannot run at
// all (ErrRunning: the same source is already running).
//
// # Polling
//
// With src.Poll a source reads everything every Rescan and follows nothing
// in between, as confd does without -watch: each read is a Replace, and a
// change reaches the sink only with the next one. No watch, subscription
// or blocking query is set up: the file source watches no folder, redis
// neither subscribes nor changes notify-keyspace-events, ZooKeeper reads
// arm no watch, natskv stops its KV watcher once it has listed the bucket,
// and etcd and consul make no Watch or blocking query. env always polls.
//
// # Prefix and keys
//
// Keys are handled as confd handles them, as slash-separated paths. The
// prefix is cleaned to an absolute path (path.Join("/", prefix), so "myapp/"
// is "/myapp" and an empty prefix is "/"). Each entry of keys is joined to it
// (path.Join(prefix, key)) and is a selector: it selects the key equal to it
// and every key below it. No keys means the single selector "/", everything
// under the prefix. A key that leaves the prefix ("../x") is a configuration
// error. Selectors nested in another selector are dropped.
//
// A backend key selected by a selector is cleaned (path.Clean) and named by
// removing the prefix, as confd does with path.Join("/",
// strings.TrimPrefix(key, prefix)): with prefix "/myapp", the key
// "/myapp/database/url" is named "/database/url", and the key "/myapp" itself
// is named "/". With no prefix the name is the whole key. Templates see the
// value as values["/database/url"].
//
// Selectors match whole path segments in every backend: "/app" selects
// "/app" and "/app/x" but not "/apple". confd's Redis backend does the same;
// its etcd, env and file backends compare plain string prefixes, so there
// "/app" also catches "/apple" and the name becomes "le". weft does not
// reproduce that.
//
// When two backend keys give the same name (the etcd keys "/a//b" and "/a/b",
// the variables FOO_BAR and foo_bar), the key that sorts first is used and
// the other is reported as a problem. Between two full reads, a change only
// moves a name from one key to another when the new key sorts first.
//
// # natskv: a NATS KV bucket
//
// The bucket is src.Bucket, reached at src.Address (default
// DefaultNATSAddress, with src.Username and the password from password_env)
// or over the connection given with WithNATSConn, which the source does not
// close. KV keys use dots where paths use slashes: the path /a/b/c is the KV
// key a.b.c. Inside a segment, every byte other than A-Z, a-z, 0-9, '-' and
// '_' is written as '=' and two upper-case hex digits, so the path
// "/web/host name/a.b" is the key "web.host=20name.a=2Eb" and '=' itself is
// "=3D". The mapping is reversible: a KV key is read only when it is the
// exact encoding of a path (no '/', upper-case hex, only escaped bytes that
// need it, no "." or ".." segment); any other key is reported as a problem
// naming the key it should be. The path "/" has no KV key. A selector S reads
// the KV keys S and S.>, server-side, through one KV watcher that gives the
// current values and then every put, delete and purge. Losing the connection
// is reported as a problem; the bucket is read again in full once it is back,
// and every Rescan.
//
// # env: environment variables
//
// As confd: the path /myapp/database/url is the variable MYAPP_DATABASE_URL
// (drop the leading slash, '/' becomes '_', upper case), and a variable name
// becomes a path by lower-casing it and making every '_' a '/'
// (MYAPP_DATABASE_URL is /myapp/database/url, and "A__B" is /a/b once
// cleaned). Selection happens on variable names: the selector /myapp/database
// selects MYAPP_DATABASE and every variable starting with MYAPP_DATABASE_,
// compared case-sensitively as confd does. The prefix is removed in the same
// form, so with prefix /my_app the variable MY_APP_PORT is named /port. No
// prefix and no keys selects every variable. The environment is read at
// start and every Rescan; WithEnviron replaces os.Environ.
//
// # file: a YAML or JSON file
//
// src.Path is read whole and flattened exactly as confd's file backend does:
// starting from "/", a mapping entry k adds path.Join(parent, k) and a list
// item adds its index (/hosts/0, /hosts/1); strings are kept, integers are
// written in decimal, floats with strconv.FormatFloat(f, 'f', -1, 64) and
// booleans as true or false, all as YAML 1.1 reads them (so an unquoted yes
// is "true"); nulls, empty mappings and empty lists give nothing. A non-string
// mapping key is written with fmt.Sprint (confd would fail). A file whose
// name ends in .json (any case) is read as JSON, with numbers written as the
// YAML reader would write them; anything else is read as YAML (first
// document). The top level must be a mapping or a list. Keys are then
// selected and named as above.
//
// The file's folder is watched with fsnotify, so saves by editors that write
// a new file and rename it over the old one, and Kubernetes ConfigMap volume
// updates (which swap a "..data" link), are seen; a change is read once the
// folder has been quiet for a moment. A file that is missing, unreadable or
// does not parse is reported as a problem, keeps its last values, and is
// read again on the next change and with backoff. Changes of the target of a
// symbolic link that lives outside the folder are seen at the next Rescan.
//
// # etcd: etcd v3
//
// src.Endpoints, with src.Username and the password from password_env. Keys
// are the etcd keys themselves (paths starting with "/"; others are never
// selected). A selector S is read with ranged, paged Gets of S and of the
// prefix "S/" (the root selector: the prefix "/"), all at the revision of the
// first Get, so the read is one consistent snapshot; then a Watch of the same
// ranges starts at that revision + 1, so no change between the read and the
// watch is lost. When the watch reports the revision compacted, everything
// is read again at once. A failed read or a cancelled watch is reported as a
// problem and retried with backoff; the client reconnects by itself,
// waiting between attempts as WithBackoff says, and the watch resumes where
// it was.
//
// # redis: Redis
//
// src.Address ("host:port", or a redis://, rediss:// or unix:// URL),
// src.Database, src.Username and the password from password_env. Keys are
// the Redis keys themselves; as in confd a selector S reads the key S and
// every key matching the pattern "S/*" (the root selector: "/*"), walked
// with SCAN. A string key gives one value; a hash key gives one value per
// field, named as the path key/field; other types give nothing. Changes are
// followed with keyspace notifications: the source subscribes to the
// __keyspace@<db>__ channels of its selectors and makes sure the server's
// notify-keyspace-events includes "KEA" (CONFIG SET, keeping the flags
// already there); each notification makes it read that one key again. When
// CONFIG or the subscription is refused, this is reported as a problem and
// changes are seen at the next full read, every Rescan, which happens in any
// case. A lost subscription is reported, re-established with backoff, and
// followed by a full read, since notifications sent meanwhile are lost.
//
// # consul: Consul
//
// src.Address (default DefaultConsulAddress; "host:port" or an http:// or
// https:// URL), src.Datacenter, and the ACL token from token_env or
// token_file (without either, the client's CONSUL_HTTP_TOKEN applies, as
// for Consul's own tools). A Consul key has no leading slash: the key
// "myapp/database/url" is the path /myapp/database/url, and "key" holds the
// Consul spelling. Keys ending in "/" are the folders Consul's UI creates
// and give nothing. A selector S lists the keys starting with S without its
// leading slash (the root selector: every key) and keeps those the
// selector selects. Each selector is then followed with a blocking query
// from the index of its last answer; an answer with a new index is
// compared with the last one, key by key, into upserts and deletes. As
// Consul's documentation of blocking queries asks, an index that goes
// backwards (a snapshot restored, a store reset) makes the next query start
// over from index 0, and an index of 0 is taken as 1. A failed query is
// reported as a problem and everything is read again with backoff.
//
// src.Services names catalog services: each gives the value named
// ConsulServiceName(service) ("service:web"), a list of its instances
// whose health checks all pass, as consul-template's service function gives
// them: one ConsulInstance each ({"id", "service", "node", "datacenter",
// "address" (the service's address, else its node's), "port", "tags",
// "meta"}), sorted by node and id; a service with no healthy instance, or
// none at all, gives an empty list. Each service is followed with its own
// blocking query. A template ranges over it:
//
//	{% for i in values["service:web"] %}
//	    server {{ i.node }}-{{ i.id }} {{ i.address }}:{{ i.port }}
//	{% endfor %}
//
// # zookeeper: ZooKeeper
//
// src.Endpoints ("host:port" of each server of the ensemble), and digest
// credentials: src.Username and the password from password_env or
// password_file, added to the session (and again after every reconnection).
// Keys are znode paths. As in confd, a value is a znode with no children,
// and its data is the value: a znode that gets a child stops being a value,
// and one whose last child goes becomes one again. ZooKeeper's own
// /zookeeper subtree is read only when a selector names it or a path below
// it. A selector S reads the znode S and the tree below it, setting a data
// and a child watch on each znode (an exists watch on S while it does not
// exist). Watches fire once: each event reads its znode again, which arms
// its watches again, reads the children that appeared and forgets those
// that went; a watch still armed is not set twice, so full reads do not
// pile up watches. A lost connection or session is reported as a problem,
// and everything is read again, with backoff, once the client has
// reconnected by itself. A znode the credentials may not read is reported
// as a problem (ErrUnavailable, "not authenticated") and keeps the
// listing from completing.
package kv
