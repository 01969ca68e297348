package msg

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The puller's contract. The controller publishes one PullOrder per image,
// node and attempt on PullSubject(node), a subject of the work-queue stream
// StreamPulls, so each order is taken by one node agent and removed once
// acknowledged. The agent of that node answers with a Pulled on
// PulledSubject(node) and keeps the node's PullStatus in BucketPulls. Pull
// credentials never travel in a message: an order names the Secrets to use
// (namespace and name), and the agent reads them from the API server,
// because anyone allowed to subscribe to weft.> (an auditor) sees every
// message.

// Schemas of the puller's messages and stored values.
const (
	SchemaPullOrder  = "weft.pullorder.v1"
	SchemaPulled     = "weft.pulled.v1"
	SchemaPullStatus = "weft.pullstatus.v1"
)

// Puller subjects, as consumers and auditors subscribe to them.
const (
	PullAll   = Root + ".pull.>"
	PulledAll = Root + ".pulled.>"
)

// StreamPulls is the work queue of pull orders; StreamPulled keeps their
// outcomes.
const (
	StreamPulls  = "WEFT_PULLS"
	StreamPulled = "WEFT_PULLED"
)

// BucketPulls holds each node's pull status per PrePullImage
// (PullStatusKey).
const BucketPulls = "weft-pulls"

// PullSubject carries the pull orders of one node (PullOrder). Node names
// may hold dots, so the node is escaped with KeyEscape to stay one token.
func PullSubject(node string) string { return join("pull", KeyEscape(node)) }

// PulledSubject carries the outcomes of a node's pull orders (Pulled).
func PulledSubject(node string) string { return join("pulled", KeyEscape(node)) }

// PullStatusKey is the key of one node's PullStatus for a PrePullImage in
// BucketPulls: <namespace>.<name>.<node>, each part escaped with KeyEscape.
func PullStatusKey(namespace, name, node string) string {
	return PullStatusPrefix(namespace, name) + KeyEscape(node)
}

// PullStatusPrefix starts the keys of every node's PullStatus for a
// PrePullImage; a watch on PullStatusPrefix(ns, name)+"*" follows them.
func PullStatusPrefix(namespace, name string) string {
	return KeyEscape(namespace) + "." + KeyEscape(name) + "."
}

// ParsePullStatusKey splits a PullStatusKey into its parts.
func ParsePullStatusKey(key string) (namespace, name, node string, err error) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("%w: pull status key %q does not have 3 parts", ErrInvalid, key)
	}
	out := make([]string, 3)
	for i, p := range parts {
		if out[i], err = KeyUnescape(p); err != nil {
			return "", "", "", err
		}
	}
	return out[0], out[1], out[2], nil
}

// Pull modes (PrePullPolicy spec.mode): the node agent pulls through the
// container runtime's CRI ImageService, or a Job per node makes the kubelet
// pull.
const (
	PullModeCRI = "cri"
	PullModeJob = "job"
)

// SecretRef names a Secret; its content is never in a message.
type SecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r SecretRef) String() string { return r.Namespace + "/" + r.Name }

// PullTarget names one image to pull onto one node for a PrePullImage.
type PullTarget struct {
	// Namespace, Name and UID of the PrePullImage the pull is for.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Image     string `json:"image"`
	Node      string `json:"node"`
	// Attempt counts the controller's attempts at this image on this node,
	// from 1. A failed attempt is retried (if at all) by the controller
	// with a new order and the next attempt number.
	Attempt int `json:"attempt"`
}

func (p PullTarget) check() error {
	if err := need("namespace", p.Namespace, "name", p.Name, "uid", p.UID, "image", p.Image, "node", p.Node); err != nil {
		return err
	}
	if p.Attempt < 1 {
		return fmt.Errorf("%w: attempt %d is below 1", ErrInvalid, p.Attempt)
	}
	return nil
}

// ID is the Nats-Msg-Id of the order for this image, node and attempt, and
// of its outcome: the same order published twice is stored once, and so is
// its outcome.
func (p PullTarget) ID() string {
	return fmt.Sprintf("%s/%s/%s#%d", p.UID, KeyEscape(p.Node), p.Image, p.Attempt)
}

// PullOrder asks the agent of Node to pull Image before Deadline.
type PullOrder struct {
	PullTarget
	Mode string `json:"mode"` // PullModeCRI or PullModeJob
	// PullSecrets are the workload's imagePullSecrets and its
	// ServiceAccount's, tried in order as the kubelet tries them. They are
	// in the PrePullImage's namespace, as a Pod's are in its own: an
	// order naming a Secret of another namespace is invalid.
	PullSecrets []SecretRef `json:"pullSecrets,omitempty"`
	// Deadline ends the pull: an order not carried out by then is failed.
	Deadline time.Time `json:"deadline"`
	// Limits are the policy's limits on pulls at once, for an agent that
	// holds slots (ClusterSlotScope, NodeSlotScope, RegistrySlotScope)
	// while it pulls; absent: none given.
	Limits *PullLimits `json:"limits,omitempty"`
}

// PullLimits are the most pulls at once in the cluster, on one node and
// from one registry host (a PrePullPolicy's spec.limits).
type PullLimits struct {
	Cluster     int `json:"cluster"`
	PerNode     int `json:"perNode"`
	PerRegistry int `json:"perRegistry"`
}

func (l *PullLimits) check() error {
	if l == nil {
		return nil
	}
	if l.Cluster < 1 || l.PerNode < 1 || l.PerRegistry < 1 {
		return fmt.Errorf("%w: limits %d/%d/%d (cluster/perNode/perRegistry) must each be at least 1", ErrInvalid, l.Cluster, l.PerNode, l.PerRegistry)
	}
	return nil
}

func (PullOrder) Schema() string { return SchemaPullOrder }
func (o PullOrder) Validate() error {
	if err := o.check(); err != nil {
		return err
	}
	if o.Mode != PullModeCRI && o.Mode != PullModeJob {
		return fmt.Errorf("%w: mode %q is neither %s nor %s", ErrInvalid, o.Mode, PullModeCRI, PullModeJob)
	}
	if o.Deadline.IsZero() {
		return fmt.Errorf("%w: deadline is missing", ErrInvalid)
	}
	if err := o.Limits.check(); err != nil {
		return err
	}
	for i, s := range o.PullSecrets {
		if s.Namespace == "" || s.Name == "" {
			return fmt.Errorf("%w: pullSecrets[%d] needs a namespace and a name", ErrInvalid, i)
		}
		if s.Namespace != o.Namespace {
			return fmt.Errorf("%w: pullSecrets[%d] %s is not in the PrePullImage's namespace %s", ErrInvalid, i, s, o.Namespace)
		}
	}
	return nil
}

// Pull outcomes (Pulled.Outcome).
const (
	PullOutcomePulled  = "pulled"
	PullOutcomePresent = "present" // the runtime had the image: nothing pulled
	PullOutcomeFailed  = "failed"
)

// Pulled is the outcome of one pull order.
type Pulled struct {
	PullTarget
	Outcome string `json:"outcome"`
	// ImageRef is the runtime's id of the image (sha256:...), Digest the
	// repository digest it was pulled by (name@sha256:...).
	ImageRef string        `json:"imageRef,omitempty"`
	Digest   string        `json:"digest,omitempty"`
	Size     uint64        `json:"size,omitempty"` // bytes, as the runtime reports the image
	Duration time.Duration `json:"durationNs"`
	// Error says why the pull failed: the registry's or the runtime's
	// message, and the pull secrets that could not be used, by name.
	Error string `json:"error,omitempty"`
	// Problems name the pull secrets that could not be used (missing, not
	// readable, not a pull secret), whatever the outcome; never their
	// content.
	Problems []string `json:"problems,omitempty"`
	// Agent is the replica that carried the order out.
	Agent string    `json:"agent,omitempty"`
	At    time.Time `json:"at"`
}

func (Pulled) Schema() string { return SchemaPulled }
func (p Pulled) Validate() error {
	if err := p.check(); err != nil {
		return err
	}
	switch p.Outcome {
	case PullOutcomePulled, PullOutcomePresent:
	case PullOutcomeFailed:
		if p.Error == "" {
			return fmt.Errorf("%w: a failed pull needs an error", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: outcome %q is none of pulled, present, failed", ErrInvalid, p.Outcome)
	}
	return nil
}

// PullPhase is where a pull stands.
type PullPhase string

// Pull phases, of one image and of a node's images together.
const (
	PullPending PullPhase = "Pending"
	PullPulling PullPhase = "Pulling"
	PullPulled  PullPhase = "Pulled"
	PullFailed  PullPhase = "Failed"
)

// ImagePull is the state of one image's pull on a node.
type ImagePull struct {
	Image    string    `json:"image"`
	Phase    PullPhase `json:"phase"`
	Attempts int       `json:"attempts"` // the order's Attempt last worked on
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Message: why it failed, or what it waits for.
	Message string `json:"message,omitempty"`
	// Problems name the pull secrets that could not be used (Pulled.Problems).
	Problems []string `json:"problems,omitempty"`
	Present  bool     `json:"present,omitempty"` // the runtime had it: nothing pulled
	ImageRef string   `json:"imageRef,omitempty"`
	Digest   string   `json:"digest,omitempty"`
	Size     uint64   `json:"size,omitempty"`
}

// PullStatus is one node's pull state for a PrePullImage, in BucketPulls
// under PullStatusKey: one ImagePull per image ordered to the node, sorted
// by image. Phase sums them up (see Set).
type PullStatus struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	UID       string      `json:"uid"`
	Node      string      `json:"node"`
	Phase     PullPhase   `json:"phase"`
	Images    []ImagePull `json:"images"`
	At        time.Time   `json:"at"`
}

func (PullStatus) Schema() string { return SchemaPullStatus }
func (s PullStatus) Validate() error {
	if err := need("namespace", s.Namespace, "name", s.Name, "uid", s.UID, "node", s.Node); err != nil {
		return err
	}
	for _, p := range append([]PullPhase{s.Phase}, phases(s.Images)...) {
		switch p {
		case PullPending, PullPulling, PullPulled, PullFailed:
		default:
			return fmt.Errorf("%w: phase %q is none of Pending, Pulling, Pulled, Failed", ErrInvalid, p)
		}
	}
	return nil
}

func phases(images []ImagePull) []PullPhase {
	out := make([]PullPhase, len(images))
	for i, p := range images {
		out[i] = p.Phase
	}
	return out
}

// Image returns the state of image, if the status has it.
func (s PullStatus) Image(image string) (ImagePull, bool) {
	i, ok := slices.BinarySearchFunc(s.Images, image, func(p ImagePull, image string) int { return strings.Compare(p.Image, image) })
	if !ok {
		return ImagePull{}, false
	}
	return s.Images[i], true
}

// Set records p (replacing the image's previous state) and sums the
// images up in Phase: Pulling while any image is pulling, else Pending
// while any waits, else Failed when any failed, else Pulled.
func (s *PullStatus) Set(p ImagePull) {
	i, ok := slices.BinarySearchFunc(s.Images, p.Image, func(q ImagePull, image string) int { return strings.Compare(q.Image, image) })
	if ok {
		s.Images[i] = p
	} else {
		s.Images = slices.Insert(s.Images, i, p)
	}
	s.Phase = sumUp(s.Images)
}

func sumUp(images []ImagePull) PullPhase {
	ps := phases(images)
	for _, p := range []PullPhase{PullPulling, PullPending, PullFailed} {
		if slices.Contains(ps, p) {
			return p
		}
	}
	if len(ps) == 0 {
		return PullPending
	}
	return PullPulled
}
