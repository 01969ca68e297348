package deployer_test

import "github.com/nats-io/nats.go/jetstream"

func jetstreamFilter(subject string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(subject)
}
