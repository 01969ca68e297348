package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// statusTries bounds the compare-and-set rounds of one status write; the
// node's agent is its status's only writer besides the controller, so a
// conflict is rare and short.
const statusTries = 10

// readStatus returns the node's status for t's PrePullImage and its
// revision (0: none yet). A status of an earlier PrePullImage of the same
// name (another UID), or one that does not decode, reads as empty at its
// revision, so that the next write replaces it.
func (a *agent) readStatus(ctx context.Context, t msg.PullTarget) (msg.PullStatus, uint64, error) {
	empty := msg.PullStatus{Namespace: t.Namespace, Name: t.Name, UID: t.UID, Node: t.Node, Phase: msg.PullPending}
	key := msg.PullStatusKey(t.Namespace, t.Name, t.Node)
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return empty, 0, nil
	}
	if err != nil {
		return empty, 0, fmt.Errorf("read pull status %s: %w", key, err)
	}
	var st msg.PullStatus
	if err := msg.Decode(e.Value(), &st); err != nil {
		a.env.Log.WarnContext(ctx, "pull status does not decode; it is replaced", "key", key, "err", err)
		return empty, e.Revision(), nil
	}
	if st.UID != t.UID {
		return empty, e.Revision(), nil
	}
	return st, e.Revision(), nil
}

// record sets the state of t's image in the node's status, with
// compare-and-set on the status's revision, reading it again after a
// conflict.
func (a *agent) record(ctx context.Context, t msg.PullTarget, p msg.ImagePull) error {
	key := msg.PullStatusKey(t.Namespace, t.Name, t.Node)
	for range statusTries {
		st, rev, err := a.readStatus(ctx, t)
		if err != nil {
			return err
		}
		st.Set(p)
		st.At = time.Now().UTC()
		data, err := msg.Encode(st)
		if err != nil {
			return msg.Permanent(err)
		}
		if rev == 0 {
			_, err = a.kv.Create(ctx, key, data)
		} else {
			_, err = a.kv.Update(ctx, key, data, rev)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || msg.IsWrongLastSequence(err):
			continue
		default:
			return fmt.Errorf("write pull status %s: %w", key, err)
		}
	}
	return fmt.Errorf("write pull status %s: %d conflicting writes in a row", key, statusTries)
}
