package cri_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/services/puller/cri"
)

func dockerConfigJSON(name, body string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(body)}}
}

func dockercfg(name, body string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: corev1.SecretTypeDockercfg,
		Data: map[string][]byte{corev1.DockerConfigKey: []byte(body)}}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestKeyringLookup matches images to registry locations as the kubelet's
// keyring does (pkg/credentialprovider: globs per host part, equal ports,
// path prefixes, most specific first, Docker Hub's index.docker.io).
func TestKeyringLookup(t *testing.T) {
	var k cri.Keyring
	secrets := []*corev1.Secret{
		dockerConfigJSON("json", `{"auths":{
			"registry.example.com": {"username":"plain","password":"p1"},
			"registry.example.com/team": {"auth":"`+b64("team:p2")+`"},
			"https://*.corp.example:5000/v2/": {"username":"glob","password":"p3"},
			"https://index.docker.io/v1/": {"username":"hub","password":"p4"},
			"127.0.0.1:5000": {"username":"local","password":"p5","identitytoken":"tok"}
		}}`),
		dockercfg("cfg", `{"registry.example.com": {"username":"legacy","password":"p6","email":"a@b"}}`),
	}
	for _, s := range secrets {
		if err := k.AddSecret(s); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		image string
		want  []string // usernames, in order
	}{
		{"registry.example.com/shop/web:1", []string{"plain", "legacy"}},
		{"registry.example.com/team/app@sha256:" + strings.Repeat("a", 64), []string{"team", "plain", "legacy"}},
		{"eu.corp.example:5000/x/y:2", []string{"glob"}},
		{"eu.corp.example/x/y:2", nil},      // port differs
		{"a.eu.corp.example:5000/x:1", nil}, // one host part more
		{"nginx", []string{"hub"}},          // docker.io/library/nginx
		{"docker.io/bitnami/redis:7", []string{"hub"}},
		{"bitnami/redis", []string{"hub"}},
		{"127.0.0.1:5000/tools/noop:1", []string{"local"}},
		{"127.0.0.1:5001/tools/noop:1", nil},
		{"localhost/x:1", nil},
		{"other.example.com/a:1", nil},
	}
	for _, tc := range cases {
		t.Run(tc.image, func(t *testing.T) {
			got, ok, err := k.Lookup(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			var users []string
			for _, a := range got {
				users = append(users, a.Username)
			}
			if ok != (len(tc.want) > 0) || strings.Join(users, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("Lookup(%s) = %v %v, want %v", tc.image, users, ok, tc.want)
			}
		})
	}
	got, _, _ := k.Lookup("registry.example.com/team/app:1")
	if got[0].Password != "p2" || got[0].Secret != "shop/json" || got[2].Secret != "shop/cfg" {
		t.Fatalf("credentials %+v: want auth decoded and each naming its secret", got)
	}
	got, _, _ = k.Lookup("127.0.0.1:5000/x:1")
	if got[0].IdentityToken != "tok" {
		t.Fatalf("identity token not kept: %+v", got[0])
	}
	if _, _, err := k.Lookup("UPPER/Case:1"); !errors.Is(err, cri.ErrInvalidReference) {
		t.Fatalf("bad reference: %v", err)
	}
}

// TestKeyringBadSecrets: a secret that is no pull secret is an error that
// names it and never shows its content.
func TestKeyringBadSecrets(t *testing.T) {
	const secret = "hunter2-do-not-print"
	cases := []struct {
		name string
		s    *corev1.Secret
		want string
	}{
		{"opaque", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "opaque"}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"r":{"password":"` + secret + `"}}}`)}}, `secret shop/opaque is of type "Opaque"`},
		{"json type, cfg key", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "mixed"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigKey: []byte(`{}`)}}, "secret shop/mixed is of type"},
		{"not json", dockerConfigJSON("broken", `{"auths": `+secret), "secret shop/broken: .dockerconfigjson is not a docker config: syntax error"},
		{"auth not base64", dockerConfigJSON("b64", `{"auths":{"r.example.com":{"auth":"`+secret+`!"}}}`), `registry "r.example.com": "auth" is not base64`},
		{"auth without colon", dockercfg("colon", `{"r.example.com":{"auth":"`+b64(secret)+`"}}`), `"auth" is not base64 of "username:password"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var k cri.Keyring
			err := k.AddSecret(tc.s)
			if !errors.Is(err, cri.ErrBadSecret) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AddSecret: %v, want ErrBadSecret saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the secret's content: %v", err)
			}
		})
	}
}

// TestRegistryHost: every name of one registry is one host, Docker Hub's
// as the keyring files it.
func TestRegistryHost(t *testing.T) {
	cases := []struct {
		image, want string
	}{
		{"nginx", "index.docker.io"},
		{"nginx:1.27", "index.docker.io"},
		{"library/nginx", "index.docker.io"},
		{"bitnami/redis:7", "index.docker.io"},
		{"docker.io/library/nginx", "index.docker.io"},
		{"index.docker.io/library/nginx@sha256:" + strings.Repeat("a", 64), "index.docker.io"},
		{"registry-1.docker.io/library/nginx", "registry-1.docker.io"},
		{"ghcr.io/org/app:v1", "ghcr.io"},
		{"Registry.Example.COM:5000/team/app", "registry.example.com:5000"},
		{"127.0.0.1:5000/shop/web:1", "127.0.0.1:5000"},
		{"localhost/app", "localhost"},
		{"localhost:5000/app", "localhost:5000"},
		{"[::1]:5000/app:1", "[::1]:5000"},
		{"UPPER/app", "upper"}, // an upper-case first part is a host, as Docker reads it
	}
	for _, tc := range cases {
		t.Run(tc.image, func(t *testing.T) {
			got, err := cri.RegistryHost(tc.image)
			if err != nil || got != tc.want {
				t.Fatalf("RegistryHost(%q) = %q, %v; want %q", tc.image, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "UPPER", "app:tag:tag", "a b"} {
		if got, err := cri.RegistryHost(bad); !errors.Is(err, cri.ErrInvalidReference) || !cri.IsPermanent(err) {
			t.Errorf("RegistryHost(%q) = %q, %v; want ErrInvalidReference", bad, got, err)
		}
	}
}
