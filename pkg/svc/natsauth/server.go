// Package natsauth secures weft's NATS: it writes the nats-server
// configuration of weft's users, one per role of pkg/msg's access table
// (msg.Accesses), each allowed exactly what its role does and refused the
// rest, identified by an nkey (or a user and password); and it turns a
// process's credential and TLS settings (--nats-creds, --nats-nkey,
// --nats-user/--nats-password, --nats-tls-ca/-cert/-key and their WEFT_*
// variables) into nats.go connection options.
//
// The permissions come from the table only: PermissionsConfig is the same
// text for every deployment (deploy/nats/permissions.conf is it, kept equal
// by a test); ServerConfig adds the users of one deployment in an account
// of their own, AuthorizationConfig in the server's authorization block,
// including the permissions file (deploy/k8s: `weft nats-keys`). A user
// of the site-link role may connect only as a leaf node.
package natsauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/weftio/weft/pkg/msg"
)

// Account is the NATS account weft's users are in (JetStream enabled).
const Account = "WEFT"

// PermissionsVar is the configuration variable holding role's permissions.
func PermissionsVar(role msg.Role) string {
	return "weft_" + strings.ReplaceAll(string(role), "-", "_")
}

// PermissionsConfig is the nats-server configuration text that defines one
// variable per role (PermissionsVar) holding its permissions, generated
// from msg.Accesses. nats-server refuses a configuration in which a
// variable is defined and never used: one that includes this text must
// give every role a user (AuthorizationConfig checks it).
func PermissionsConfig() string { return permissionsConfig(msg.Roles()) }

// permissionsConfig defines the permission variables of roles.
func permissionsConfig(roles []msg.Role) string {
	var b strings.Builder
	b.WriteString("# weft's NATS permissions, one variable per role, generated from pkg/msg's\n")
	b.WriteString("# access table by `weft nats-config --permissions-only`. Do not edit.\n")
	for _, a := range msg.Accesses() {
		if !slices.Contains(roles, a.Role) {
			continue
		}
		p := a.Permissions()
		fmt.Fprintf(&b, "\n# %s: %s\n", a.Role, a.What)
		fmt.Fprintf(&b, "%s = {\n", PermissionsVar(a.Role))
		writeList(&b, "publish", p.Publish)
		writeList(&b, "subscribe", p.Subscribe)
		if p.Responses > 0 {
			fmt.Fprintf(&b, "  allow_responses: {max: %d}\n", p.Responses)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func writeList(b *strings.Builder, name string, subjects []string) {
	fmt.Fprintf(b, "  %s: {\n    allow: [\n", name)
	for _, s := range subjects {
		fmt.Fprintf(b, "      %s\n", strconv.Quote(s))
	}
	b.WriteString("    ]\n  }\n")
}

// User is one NATS user of a role: an nkey (public key, "U..."), or a
// user name and password.
type User struct {
	Role     msg.Role
	NKey     string
	Name     string
	Password string
}

// ErrNoCredential reports a user with neither an nkey nor a password.
var ErrNoCredential = errors.New("user has neither an nkey nor a password")

// ServerConfig is the nats-server configuration of weft's users: the
// permission variables, then the account Account with JetStream and one
// user per entry. Include it in (or append it to) the server's
// configuration.
func ServerConfig(users []User) (string, error) {
	var b strings.Builder
	// only the variables the users name: the server refuses unused ones
	roles := make([]msg.Role, 0, len(users))
	for _, u := range users {
		roles = append(roles, u.Role)
	}
	b.WriteString(permissionsConfig(roles))
	fmt.Fprintf(&b, "\naccounts {\n  %s {\n    jetstream: enabled\n    users: [\n", Account)
	if err := writeUsers(&b, "      ", users); err != nil {
		return "", err
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String(), nil
}

// ErrRoleWithoutUser reports a role AuthorizationConfig was given no user
// of: the server would refuse its permission variable, defined and unused.
var ErrRoleWithoutUser = errors.New("every role needs a user where all permission variables are defined")

// AuthorizationConfig is nats-server's authorization block of weft's
// users, in the server's global account: one user per entry, each with
// its role's permission variable (PermissionsVar). permissions is the path
// of a file holding PermissionsConfig's text (deploy/nats/permissions.conf),
// relative to the block's own file, which the block includes first: a
// variable is seen only in the file that defines or includes it. Empty, the
// variables must come before the block in the same file. Since that text
// defines every role's variable, and nats-server refuses one defined and
// never used, users must hold a user of every role.
func AuthorizationConfig(users []User, permissions string) (string, error) {
	for _, r := range msg.Roles() {
		if !slices.ContainsFunc(users, func(u User) bool { return u.Role == r }) {
			return "", fmt.Errorf("%w: no user of role %s", ErrRoleWithoutUser, r)
		}
	}
	var b strings.Builder
	b.WriteString("# weft's NATS users, one per role, each with its role's permissions\n")
	b.WriteString("# (the variables of weft's permissions.conf). Generated; do not edit.\n")
	if permissions != "" {
		fmt.Fprintf(&b, "include %s\n", strconv.Quote(permissions))
	}
	b.WriteString("authorization {\n  users: [\n")
	if err := writeUsers(&b, "    ", users); err != nil {
		return "", err
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

// writeUsers writes one line per user. The site link's user may connect
// only as a leaf node: its permissions are those of a leaf connection.
func writeUsers(b *strings.Builder, indent string, users []User) error {
	for _, u := range users {
		a, err := msg.AccessOf(u.Role)
		if err != nil {
			return err
		}
		var who string
		switch {
		case u.NKey != "":
			if !nkeys.IsValidPublicUserKey(u.NKey) {
				return fmt.Errorf("role %s: %q is not a public user nkey", u.Role, u.NKey)
			}
			who = "nkey: " + strconv.Quote(u.NKey)
		case u.Name != "" && u.Password != "":
			who = "user: " + strconv.Quote(u.Name) + ", password: " + strconv.Quote(u.Password)
		default:
			return fmt.Errorf("role %s: %w", u.Role, ErrNoCredential)
		}
		var types string
		if a.Link {
			types = `, allowed_connection_types: ["LEAFNODE"]`
		}
		fmt.Fprintf(b, "%s{%s, permissions: $%s%s}\n", indent, who, PermissionsVar(u.Role), types)
	}
	return nil
}

// SeedFile is the file in a keys folder holding role's nkey seed.
func SeedFile(dir string, role msg.Role) string { return filepath.Join(dir, string(role)+".nk") }

// NKeyUsers returns one nkey user per role, reading each seed from dir
// (SeedFile) and creating the seeds that are missing (mode 0600, the
// folder 0700). A process of a role connects with its seed file
// (--nats-nkey); the server configuration names only public keys.
func NKeyUsers(dir string, roles []msg.Role) ([]User, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("nkeys: %w", err)
	}
	var users []User
	for _, r := range roles {
		if _, err := msg.AccessOf(r); err != nil {
			return nil, err
		}
		kp, err := seedOf(SeedFile(dir, r))
		if err != nil {
			return nil, fmt.Errorf("nkeys: role %s: %w", r, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("nkeys: role %s: %w", r, err)
		}
		users = append(users, User{Role: r, NKey: pub})
	}
	return users, nil
}

// seedOf reads the user seed in path, or creates one there.
func seedOf(path string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
			return nil, err
		}
		return kp, nil
	}
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return kp, nil
}
