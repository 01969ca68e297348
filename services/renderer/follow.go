package renderer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
)

// lastWriter is the part of the resources bucket's stream the renderer
// re-reads keys through: the last write of a key's subject, whether a put
// or a delete or purge marker, with its real revision (stream sequence).
type lastWriter interface {
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
	Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error)
}

// follower applies change messages to the index level-based: a change only
// says that its key was written; what the index gets is the key's last
// write in the bucket, at that write's own revision. A delete is recorded
// at the revision of its delete or purge marker, so any later put, whose
// revision is higher, wins; a redelivered, duplicate or reordered change
// reads the same last write and changes nothing.
type follower struct {
	ix     *index.Index
	bucket lastWriter
	log    *slog.Logger
}

// applyChange brings c.Key in the index to the bucket's last write of it
// and reports whether the index changed. A change whose revision is
// beyond that last write is an error (msg.ErrUnconfirmed): retried while
// the message is younger than msg.ConfirmWait, then permanent. Once it
// returns nil, the bucket is known to hold c.Revision (or a later write of
// the key).
func (f *follower) applyChange(ctx context.Context, c msg.Change, age time.Duration) (bool, error) {
	m, err := f.bucket.GetLastMsgForSubject(ctx, msg.ResourceSubject(c.Key))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Nothing left of the key (purged and compacted away): whatever
		// the index holds of it goes, at the revision it holds, so any
		// later write of the key wins.
		info, err := f.bucket.Info(ctx)
		if err != nil {
			return false, msg.Retry(fmt.Errorf("read %s: %w", c.Key, err), time.Second)
		}
		if info.State.LastSeq < c.Revision {
			return false, ahead(c, info.State.LastSeq, age)
		}
		return f.ix.Forget(c.Type, c.Key), nil
	case err != nil:
		return false, msg.Retry(fmt.Errorf("read %s: %w", c.Key, err), time.Second)
	case m.Sequence < c.Revision:
		return false, ahead(c, m.Sequence, age)
	}
	switch m.Header.Get(msg.HeaderKVOperation) {
	case msg.KVOpDelete, msg.KVOpPurge:
		return f.ix.Delete(c.Type, c.Key, m.Sequence), nil
	}
	return f.put(c.Type, c.Key, m.Sequence, m.Data), nil
}

// ahead is the error for a change beyond last, the bucket's last write.
func ahead(c msg.Change, last uint64, age time.Duration) error {
	return msg.Unconfirmed(age, "change %s@%d: the bucket's last write of it is revision %d", c.Key, c.Revision, last)
}

// put stores one resource value of the bucket in the index at rev.
func (f *follower) put(typ, key string, rev uint64, data []byte) bool {
	p, ok := f.decode(typ, key, rev, data)
	return ok && f.ix.Put(p)
}

// decode reads one resource value of the bucket for the index: the
// object's JSON, which the index keeps, and its tree. An unreadable one is
// logged and ignored.
func (f *follower) decode(typ, key string, rev uint64, data []byte) (index.Put, bool) {
	var res msg.ResourceJSON
	if err := msg.Decode(data, &res); err != nil {
		f.log.Error("unreadable resource in bucket; ignored", "key", key, "revision", rev, "err", err)
		return index.Put{}, false
	}
	obj, err := index.Decode(res.Object)
	if err != nil {
		f.log.Error("unreadable object in bucket; ignored", "key", key, "revision", rev, "err", err)
		return index.Put{}, false
	}
	return index.Put{Type: typ, ID: key, Rev: rev, JSON: res.Object, Object: obj}, true
}

// decodeEntry reads one live entry of the bucket (a put of a resource
// key) for the index.
func (f *follower) decodeEntry(e jetstream.KeyValueEntry) (index.Put, bool) {
	_, typ, _, _, err := msg.ParseResourceKey(e.Key())
	if err != nil || e.Operation() != jetstream.KeyValuePut {
		return index.Put{}, false
	}
	return f.decode(typ, e.Key(), e.Revision(), e.Value())
}
