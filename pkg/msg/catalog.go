package msg

import (
	"fmt"
	"strings"
)

// Entry is one row of the catalogue of subjects, streams, buckets and stores.
type Entry struct {
	Name    string // subject pattern or store name
	Kind    string // "stream subject", "core subject", "stream", "kv bucket", "object store"
	Payload string // schema or content
	What    string
}

// Catalog lists every subject, stream, bucket and object store weft uses.
// The README's table is generated from it and a test keeps them equal.
func Catalog() []Entry {
	return []Entry{
		{ChangeSubject("<source>", "<type>"), "stream subject", SchemaChange, "one resource upsert/delete, only when its content changed"},
		{SyncSubject("<source>", "<type>"), "stream subject", SchemaSync, "initial listing of a watched type complete, with counts"},
		{RenderSubject("<target>"), "stream subject", SchemaRender, "a rendered bundle (hash, files, provenance) or a render failure"},
		{ValidateSubject("<target>"), "core request (scatter-gather)", SchemaValidate + " → " + SchemaValidateReply, "one reply per validator kind (queue group per kind); `" + ValidateSubject(ConfigTarget) + "` validates a candidate configuration"},
		{ValidatedSubject("<target>"), "stream subject", SchemaValidated, "the gathered verdict on a bundle"},
		{DeploySubject("<target>", "<instance>"), "stream subject", SchemaDeployOrder, "deploy order for one instance"},
		{DeployedSubject("<target>", "<instance>"), "stream subject", SchemaDeployed, "deploy outcome: files written, reloads, error"},
		{TriggerRenderSubject("<target>"), "core subject", SchemaTrigger + " (or empty)", "force a render of a target"},
		{TriggerResyncSubject("<source>"), "core subject", SchemaTrigger + " (or empty)", "force a full re-read of a source"},
		{TriggerDeploySubject("<target>"), "core subject", SchemaTrigger + " (or empty)", "re-deploy the last valid bundle, or the pinned one (repairs drift)"},
		{APIStatus, "core request", SchemaStatusReport, "status of every source and target"},
		{APIHistorySubject("<target>"), "core request (queue group)", SchemaHistoryRequest + " (or empty) → " + SchemaHistoryReply, "the target's kept bundles, newest first: version, hash, render time, verdict, instances that ran it; the pin"},
		{APIDiffSubject("<target>"), "core request (queue group)", SchemaDiffRequest + " → " + SchemaDiffReply, "unified diff, file by file, of two bundles of the history named by version or hash: `{\"from\":\"1\",\"to\":\"3\"}`"},
		{APIRollbackSubject("<target>"), "core request (queue group)", SchemaRollbackRequest + " → " + SchemaRollbackReply, "deploy an accepted bundle of the history to every instance and pin the target on it: `{\"to\":\"1\"}`"},
		{APIUnpinSubject("<target>"), "core request (queue group)", SchemaUnpinRequest + " (or empty) → " + SchemaUnpinReply, "lift the pin and deploy the last accepted bundle; every API request is answered with `" + SchemaAPIError + "` (`{\"error\": ...}`) when it cannot be served"},
		{FetchSubject("<source>"), "core request", SchemaFetch + " → " + SchemaFetchReply, "the full body of an object a Kubernetes source keeps on demand (`store: on-demand`)"},
		{DLQSubject("<service>"), "stream subject", SchemaDeadLetter, "a message a service could not decode or handle, with the reason"},
		{join("pull", "<node>"), "stream subject (work queue)", SchemaPullOrder, "pull one image onto one node (PrePullImage, image, attempt, pull secrets by name only, deadline, the policy's limits); taken by that node's agent; node escaped as in keys"},
		{join("pulled", "<node>"), "stream subject", SchemaPulled, "outcome of a pull order: pulled, present or failed, image id and digest, size, the registry's or runtime's error"},
		{StreamChanges, "stream", "", strings.Join(streamSubjects(StreamChanges), ", ")},
		{StreamRenders, "stream", "", strings.Join(streamSubjects(StreamRenders), ", ")},
		{StreamValidated, "stream", "", strings.Join(streamSubjects(StreamValidated), ", ")},
		{StreamDeploys, "stream", "", strings.Join(streamSubjects(StreamDeploys), ", ")},
		{StreamDLQ, "stream", "", strings.Join(streamSubjects(StreamDLQ), ", ")},
		{StreamPulls, "stream (work queue)", "", strings.Join(streamSubjects(StreamPulls), ", ")},
		{StreamPulled, "stream", "", strings.Join(streamSubjects(StreamPulled), ", ")},
		{BucketResources, "kv bucket", SchemaResource, "watched objects: `<source>.<type>.<namespace>.<name>`"},
		{BucketStatus, "kv bucket", SchemaSyncStatus + ", " + SchemaRenderStatus + ", " + SchemaValidStatus + ", " + SchemaDeployStatus + ", " + SchemaConfigStatus, "`sync.<source>.<type>`, `render.<target>`, `validate.<target>`, `deploy.<target>.<instance>`, `config`; `pin.<target>` (" + SchemaPin + "): the bundle a rollback holds the target on; `canary.<target>` (" + SchemaCanary + "): the target's last canary (deploy.canary), its phase, baselines and verdict"},
		{BucketLeases, "kv bucket", "replica id, work id, " + SchemaHeartbeat, "`render.<target>`: which renderer replica renders a target; `deploy.<target>.<instance>`: which deployer replica is carrying out an order for an instance; `ingress-status.<target>`: which watcher replica writes the status of a target's Ingresses; `gateway-status.<target>`: which watcher replica writes the Gateway API status of a target; `kind.<kind>.<replica>`: live validator kinds (heartbeats), expected with `validate.expect: registered`; `slot.<scope>.<i>`: slot i of a concurrency limit, held by the work it names (scopes `cluster`, `node.<node>`, `registry.<host>`); `" + HistoryPruneLease + "`: the deployer replica pruning the history; `canary.<target>`: the deployer replica judging a target's canary"},
		{BucketVerdicts, "kv bucket", SchemaValidated, "`<bundle hash>.<kinds>`: cached verdicts"},
		{BucketConfig, "kv bucket", SchemaConfig, "`current`: the active configuration when it comes from a ConfigMap (`weft up --config-map`)"},
		{BucketPulls, "kv bucket", SchemaPullStatus, "`<namespace>.<prepullimage>.<node>`: one node's pull state per image of a PrePullImage"},
		{BucketHistory, "kv bucket", SchemaHistoryEntry, "`<target>.<version>`: one bundle of a target's history (verdict, render time, the instances that ran it), kept per `history: {keep, max_age}`"},
		{ObjectBundles, "object store", SchemaStored + ", " + SchemaBundleManifest + ", " + SchemaConfig, "rendered bundles by content hash, candidate configurations as `config-<hash>`, stored by content (BundleStore): a description under the name lists the chunks of the bundle's manifest (each file's chunks) or of the configuration, each chunk stored once under its SHA-256 (`" + ChunkSubject("<sha256>") + "`); bounded by age (7 days) and size (`--bundle-store-max-bytes`, `WEFT_BUNDLE_STORE_MAX_BYTES`, default 1 GiB; the oldest go first); a bundle is kept (its chunks stored again before either limit reaches them) while its history entry is, or an instance runs it, a pin names it, or it is the last accepted one; a " + SchemaBundle + " stored whole by an older weft still loads"},
		{StreamValidated + ", " + BucketStatus + ", " + ObjectBundles, "sourced at a site", "", "on a site's leaf node (JetStream domain `<site>`), from the hub's domain: `" + ValidatedSubject("<target>") + "`, `" + ValidationStatusKey("<target>") + "` and `" + PinKey("<target>") + "` of the site's targets, every bundle; the rest is the site's own"},
		{StreamDeploys + ", " + BucketStatus, "sourced at the hub", "", "from each site's domain: `" + DeployedAll + "` and `deploy.>` (the site's deploy statuses, which name it)"},
	}
}

func streamSubjects(name string) []string {
	for _, s := range streamDefs {
		if s.name == name {
			return s.subjects
		}
	}
	return nil
}

// CatalogMarkdown renders Catalog as a Markdown table.
func CatalogMarkdown() string {
	var b strings.Builder
	b.WriteString("| name | kind | payload | what |\n|---|---|---|---|\n")
	for _, e := range Catalog() {
		p := e.Payload
		if p != "" && !strings.Contains(p, "`") {
			p = "`" + p + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", e.Name, e.Kind, p, e.What)
	}
	return b.String()
}
