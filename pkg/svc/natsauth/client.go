package natsauth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
)

// Client holds how a process proves who it is to NATS and checks the
// server: at most one of Creds (a .creds file: JWT and seed), NKey (a seed
// file) or User and Password; and TLS (TLSCA: the CA that signed the
// server's certificate; TLSCert and TLSKey: a client certificate, for
// servers that verify clients).
type Client struct {
	Creds, NKey     string
	User, Password  string
	TLSCA           string
	TLSCert, TLSKey string
}

// Flags registers the settings on fs, each defaulting to its WEFT_*
// variable.
func (c *Client) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Creds, "nats-creds", os.Getenv("WEFT_NATS_CREDS"), "NATS credentials file (JWT and nkey seed) [WEFT_NATS_CREDS]")
	fs.StringVar(&c.NKey, "nats-nkey", os.Getenv("WEFT_NATS_NKEY"), "file holding this process's NATS nkey seed (weft nats-config writes one per role) [WEFT_NATS_NKEY]")
	fs.StringVar(&c.User, "nats-user", os.Getenv("WEFT_NATS_USER"), "NATS user name [WEFT_NATS_USER]")
	fs.StringVar(&c.Password, "nats-password", os.Getenv("WEFT_NATS_PASSWORD"), "NATS password; prefer the variable, a flag shows in ps [WEFT_NATS_PASSWORD]")
	fs.StringVar(&c.TLSCA, "nats-tls-ca", os.Getenv("WEFT_NATS_TLS_CA"), "PEM file of the CA that signed the NATS server's certificate [WEFT_NATS_TLS_CA]")
	fs.StringVar(&c.TLSCert, "nats-tls-cert", os.Getenv("WEFT_NATS_TLS_CERT"), "PEM client certificate for NATS (with --nats-tls-key) [WEFT_NATS_TLS_CERT]")
	fs.StringVar(&c.TLSKey, "nats-tls-key", os.Getenv("WEFT_NATS_TLS_KEY"), "PEM private key of --nats-tls-cert [WEFT_NATS_TLS_KEY]")
}

// ErrSettings reports credential or TLS settings that do not go together.
var ErrSettings = errors.New("NATS credential settings")

// Options returns the nats.go options for the settings; none set: none.
func (c Client) Options() ([]nats.Option, error) {
	var opts []nats.Option
	n := 0
	if c.Creds != "" {
		n++
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKey != "" {
		n++
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-nkey: %w", ErrSettings, err)
		}
		opts = append(opts, o)
	}
	if c.User != "" || c.Password != "" {
		n++
		if c.User == "" || c.Password == "" {
			return nil, fmt.Errorf("%w: --nats-user and --nats-password go together", ErrSettings)
		}
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if n > 1 {
		return nil, fmt.Errorf("%w: give one of --nats-creds, --nats-nkey, --nats-user", ErrSettings)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, fmt.Errorf("%w: --nats-tls-cert and --nats-tls-key go together", ErrSettings)
	}
	if c.TLSCA != "" {
		if _, err := os.Stat(c.TLSCA); err != nil {
			return nil, fmt.Errorf("%w: --nats-tls-ca: %w", ErrSettings, err)
		}
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// LogErrors is a nats.go option that logs what the server sends the
// connection asynchronously at ERROR: a publish or subscription the user
// is not allowed (the server names the subject), a slow consumer. Without
// it, a refused publish is silent and only its missing answer shows. Each
// refusal is also sent to refused, when not nil, without waiting.
func LogErrors(log *slog.Logger, refused chan<- error) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		attrs := []any{"err", err}
		if sub != nil {
			attrs = append(attrs, "subscription", sub.Subject)
		}
		if !errors.Is(err, nats.ErrPermissionViolation) {
			log.Error("NATS error", attrs...)
			return
		}
		log.Error("NATS refused an operation: this process's user lacks the permission (weft nats-config, README \"Securing NATS\")", attrs...)
		if refused != nil {
			select {
			case refused <- err:
			default:
			}
		}
	})
}

// ErrMayNotProvision reports a user the server does not let create or
// update streams.
var ErrMayNotProvision = errors.New("this NATS user may not create streams and buckets: run `weft provision` with the provisioner's or admin's credentials once, and start with --provision=false")

// Provision is msg.Provision that stops at the first refusal received on
// refused (LogErrors) while it runs: a user without the right is told so
// at once rather than after every retry timed out.
func Provision(ctx context.Context, js msg.Provisioner, replicas int, refused <-chan error, opts ...msg.ProvisionOption) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case err := <-refused:
			cancel(fmt.Errorf("%w: %w", ErrMayNotProvision, err))
		case <-done:
		}
	}()
	err := msg.Provision(ctx, js, replicas, opts...)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrMayNotProvision) {
		return cause
	}
	return err
}
