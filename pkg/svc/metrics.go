package svc

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers every collector with reg, naming the service in the error.
func Register(reg prometheus.Registerer, service string, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s metrics: %w", service, err)
		}
	}
	return nil
}
