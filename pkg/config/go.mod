module github.com/weftio/weft/pkg/config

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/weftio/weft/pkg/msg v0.0.0
	go.yaml.in/yaml/v3 v3.0.5
	k8s.io/apimachinery v0.37.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)

replace github.com/weftio/weft/pkg/msg => ../msg
