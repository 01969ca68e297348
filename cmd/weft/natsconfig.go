package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

func natsConfigCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "nats-config", summary: "Print the nats-server configuration of weft's users: the permissions of every role\n(generated from pkg/msg's access table) and account " + natsauth.Account + " with one nkey user per\nrole. Each role's nkey seed is read from --keys/<role>.nk, or created there (0600);\ngive a process its role's file with --nats-nkey. --permissions-only prints what\ndeploy/nats/permissions.conf holds."})
	keys := fs.String("keys", "nats-keys", "folder of the nkey seeds, one <role>.nk per role")
	roles := fs.String("roles", "", "comma-separated roles to make users of (default: every role: "+strings.Join(roleNames(), ", ")+")")
	permsOnly := fs.Bool("permissions-only", false, "print only the permission variables, no users")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("nats-config takes no arguments, got %q", fs.Args()))
	}
	if *permsOnly {
		_, err := io.WriteString(stdout, natsauth.PermissionsConfig())
		return err
	}
	want := msg.Roles()
	if *roles != "" {
		want = nil
		for _, r := range strings.Split(*roles, ",") {
			if _, err := msg.AccessOf(msg.Role(strings.TrimSpace(r))); err != nil {
				return usageError(err)
			}
			want = append(want, msg.Role(strings.TrimSpace(r)))
		}
	}
	users, err := natsauth.NKeyUsers(*keys, want)
	if err != nil {
		return err
	}
	conf, err := natsauth.ServerConfig(users)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, conf)
	return err
}

func roleNames() []string {
	var out []string
	for _, r := range msg.Roles() {
		out = append(out, string(r))
	}
	return out
}

func provisionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(command{name: "provision", summary: "Create or update every stream, key-value bucket and object store weft uses, on the\nNATS server of --nats-url, with credentials allowed to (the admin or provisioner role).\nServices started with --provision=false then need no right to create anything."})
	url := fs.String("nats-url", envOr("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL [WEFT_NATS_URL]")
	replicas := fs.Int("replicas", 1, "JetStream replicas of streams and buckets (3 on a 3-node cluster)")
	bundleMax := fs.Int64("bundle-store-max-bytes", msg.DefaultBundleStoreMaxBytes, "size cap of the weft-bundles store; past it the oldest chunks go (kept bundles are stored again before)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long, waiting for the server meanwhile")
	cfgPath := fs.String("config", "", "weft.yaml whose sites the streams and buckets source from (at the hub) or to (with --site); empty: no sites")
	site := fs.String("site", "", "provision the NATS leaf node of this site of --config's sites")
	var auth natsauth.Client
	auth.Flags(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("provision takes no arguments, got %q", fs.Args()))
	}
	var popts []msg.ProvisionOption
	switch {
	case *cfgPath != "":
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if err := cfg.CheckSite(*site); err != nil {
			return usageError(err)
		}
		popts = cfg.ProvisionOptions(*site)
	case *site != "":
		return usageError(errors.New("--site needs --config: the site's targets are in weft.yaml"))
	}
	opts, err := auth.Options()
	if err != nil {
		return usageError(err)
	}
	refused := make(chan error, 1)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// A server not up yet (a Job started with it) is waited for, as long
	// as --timeout allows.
	connected := make(chan struct{}, 1)
	up := func(*nats.Conn) {
		select {
		case connected <- struct{}{}:
		default:
		}
	}
	nc, err := nats.Connect(*url, append([]nats.Option{nats.Name("weft provision"), nats.Timeout(5 * time.Second),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(2 * time.Second),
		nats.ConnectHandler(up), nats.ReconnectHandler(up),
		natsauth.LogErrors(slog.New(slog.NewTextHandler(stderr, nil)), refused)}, opts...)...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", *url, err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		select {
		case <-connected:
		case <-ctx.Done():
			last := nc.LastError()
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("connect %s: no server let weft provision in within %v: %w", *url, *timeout, last)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := natsauth.Provision(ctx, js, *replicas, refused, append(popts, msg.WithBundleStoreMaxBytes(*bundleMax))...); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "provisioned every stream, bucket and object store")
	return nil
}
