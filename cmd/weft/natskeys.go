package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// The Secrets `weft nats-keys` keeps in its namespace.
const (
	// natsAuthSecret holds the authorization block (key natsAuthKey) the
	// NATS servers include: one nkey user per role, public keys only.
	natsAuthSecret = "weft-nats-auth"
	natsAuthKey    = "auth.conf"
	// natsSeedKey is the key of a role's Secret holding its nkey seed;
	// natsPublicKey holds its public key, for people reading the Secret.
	// (no newline: it is also read into an environment variable).
	natsSeedKey   = "seed"
	natsPublicKey = "nkey"
)

// natsRoleSecret is the Secret holding role's nkey seed.
func natsRoleSecret(role msg.Role) string { return "weft-nats-" + string(role) }

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func natsKeysCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "nats-keys", summary: "Make the NATS keys of a Kubernetes installation, in Secrets of --namespace: for every role,\n" +
		"the Secret weft-nats-<role> holding its nkey seed (key seed) is created when missing and\n" +
		"kept otherwise; the Secret " + natsAuthSecret + " (key " + natsAuthKey + ") is written again from them: the\n" +
		"authorization block of the NATS servers, one nkey user per role with its permissions\n" +
		"($weft_<role> of deploy/nats/permissions.conf). Safe to run again; --rotate replaces\n" +
		"keys. Needs get and create on Secrets of the namespace, and update on the ones it changes."})
	ns := fs.String("namespace", envOr("WEFT_NAMESPACE", ""), "namespace of the Secrets (default: the pod's own) [WEFT_NAMESPACE]")
	kubeconfig := fs.String("kubeconfig", envOr("WEFT_KUBECONFIG", ""), "kubeconfig (empty: in-cluster, else $KUBECONFIG or ~/.kube/config) [WEFT_KUBECONFIG]")
	include := fs.String("permissions-include", "../permissions/permissions.conf", "the permissions file (deploy/nats/permissions.conf) the authorization block includes, relative to the block's file where the servers mount it")
	rotate := fs.String("rotate", "", "comma-separated roles whose key is replaced by a new one (the servers and the role's processes take it when they restart)")
	var seeds seedOutputs
	fs.Var(&seeds, "write-seed", "also write a role's seed to a file (0600), as <role>=<file>; repeatable")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("nats-keys takes no arguments, got %q", fs.Args()))
	}
	rotated, err := parseRoles(*rotate)
	if err != nil {
		return usageError(fmt.Errorf("--rotate: %w", err))
	}
	if *ns == "" {
		data, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return usageError(fmt.Errorf("--namespace is not set and the pod's namespace is unknown: %w", err))
		}
		*ns = strings.TrimSpace(string(data))
	}
	cfg, err := kubeclient.RESTConfig(*kubeconfig, "")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k := natsKeys{secrets: cs.CoreV1().Secrets(*ns), include: *include, out: stdout}
	kps, err := k.make(ctx, rotated)
	if err != nil {
		return fmt.Errorf("nats-keys in namespace %s: %w", *ns, err)
	}
	for _, s := range seeds {
		seed, err := kps[s.role].Seed()
		if err != nil {
			return err
		}
		if err := os.WriteFile(s.file, seed, 0o600); err != nil {
			return fmt.Errorf("--write-seed %s: %w", s.role, err)
		}
	}
	return nil
}

// secretClient is the part of a namespace's Secrets client natsKeys uses.
type secretClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// natsKeys keeps the NATS keys of one namespace.
type natsKeys struct {
	secrets secretClient
	include string    // the permissions file the authorization block includes
	out     io.Writer // one line per Secret: what was done
}

// ErrBadSeed reports a role's Secret that holds no valid user seed: it is
// not replaced silently, since the processes using it would be locked out.
var ErrBadSeed = errors.New("holds no valid nkey user seed")

// make ensures every role's Secret (replacing the keys of rotate), then
// writes the authorization block from them. It returns each role's key.
func (k natsKeys) make(ctx context.Context, rotate []msg.Role) (map[msg.Role]nkeys.KeyPair, error) {
	kps := map[msg.Role]nkeys.KeyPair{}
	var users []natsauth.User
	for _, r := range msg.Roles() {
		kp, err := k.roleKey(ctx, r, slices.Contains(rotate, r))
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", r, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", r, err)
		}
		kps[r] = kp
		users = append(users, natsauth.User{Role: r, NKey: pub})
	}
	auth, err := natsauth.AuthorizationConfig(users, k.include)
	if err != nil {
		return nil, err
	}
	if err := k.upsert(ctx, natsAuthSecret, map[string][]byte{natsAuthKey: []byte(auth)}); err != nil {
		return nil, err
	}
	return kps, nil
}

// roleKey returns role's key from its Secret, creating the Secret with a
// new key when it is missing, or replacing its key when rotate.
func (k natsKeys) roleKey(ctx context.Context, role msg.Role, rotate bool) (nkeys.KeyPair, error) {
	name := natsRoleSecret(role)
	s, err := k.secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		kp, data, err := newRoleKey()
		if err != nil {
			return nil, err
		}
		_, err = k.secrets.Create(ctx, secret(name, role, data), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// made meanwhile by another run: take its key
			return k.roleKey(ctx, role, false)
		}
		if err != nil {
			return nil, fmt.Errorf("create Secret %s: %w", name, err)
		}
		fmt.Fprintf(k.out, "Secret %s: created\n", name)
		return kp, nil
	case err != nil:
		return nil, fmt.Errorf("get Secret %s: %w", name, err)
	case rotate:
		kp, data, err := newRoleKey()
		if err != nil {
			return nil, err
		}
		s.Data = data
		if _, err := k.secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("update Secret %s: %w", name, err)
		}
		fmt.Fprintf(k.out, "Secret %s: new key\n", name)
		return kp, nil
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(s.Data[natsSeedKey]))
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(s.Data[natsSeedKey]), []byte("SU")) {
		return nil, fmt.Errorf("Secret %s: key %s %w (--rotate %s replaces it)", name, natsSeedKey, ErrBadSeed, role)
	}
	fmt.Fprintf(k.out, "Secret %s: kept\n", name)
	return kp, nil
}

// newRoleKey makes a user key and the data of its Secret.
func newRoleKey() (nkeys.KeyPair, map[string][]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, err
	}
	return kp, map[string][]byte{natsSeedKey: seed, natsPublicKey: []byte(pub)}, nil
}

// upsert creates Secret name with data, or updates it when its data
// differs.
func (k natsKeys) upsert(ctx context.Context, name string, data map[string][]byte) error {
	s, err := k.secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := k.secrets.Create(ctx, secret(name, "", data), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s: %w", name, err)
		}
		fmt.Fprintf(k.out, "Secret %s: created\n", name)
		return nil
	case err != nil:
		return fmt.Errorf("get Secret %s: %w", name, err)
	}
	same := len(s.Data) == len(data)
	for key, v := range data {
		same = same && bytes.Equal(s.Data[key], v)
	}
	if same {
		fmt.Fprintf(k.out, "Secret %s: unchanged\n", name)
		return nil
	}
	s.Data = data
	if _, err := k.secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Secret %s: %w", name, err)
	}
	fmt.Fprintf(k.out, "Secret %s: updated\n", name)
	return nil
}

// secret is a new Secret of weft's NATS keys (of role, when not empty).
func secret(name string, role msg.Role, data map[string][]byte) *corev1.Secret {
	labels := map[string]string{"app.kubernetes.io/part-of": "weft", "app.kubernetes.io/managed-by": "weft-nats-keys"}
	if role != "" {
		labels["weft.io/nats-role"] = string(role)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// parseRoles reads a comma-separated list of roles ("": none).
func parseRoles(list string) ([]msg.Role, error) {
	var out []msg.Role
	for r := range strings.SplitSeq(list, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if _, err := msg.AccessOf(msg.Role(r)); err != nil {
			return nil, err
		}
		out = append(out, msg.Role(r))
	}
	return out, nil
}

// seedOutputs are the --write-seed flags: a role's seed written to a file.
type seedOutputs []struct {
	role msg.Role
	file string
}

func (s *seedOutputs) String() string { return "" }

func (s *seedOutputs) Set(v string) error {
	role, file, ok := strings.Cut(v, "=")
	if !ok || file == "" {
		return fmt.Errorf("want <role>=<file>, got %q", v)
	}
	if _, err := msg.AccessOf(msg.Role(role)); err != nil {
		return err
	}
	*s = append(*s, struct {
		role msg.Role
		file string
	}{msg.Role(role), file})
	return nil
}
