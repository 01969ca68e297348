package deployer_test

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func jetstreamFilter(subject string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(subject)
}

func jetstreamOrdered(subject string) jetstream.OrderedConsumerConfig {
	return jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
}

func jetstreamFetchWait(d time.Duration) jetstream.FetchOpt { return jetstream.FetchMaxWait(d) }
