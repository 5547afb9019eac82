package kafka

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are the Kafka handler's counters. Each refusal has a name: requests by api, errors by
// api and Kafka error code, and the requests that could not be read at all.
type metrics struct {
	requests        *prometheus.CounterVec
	errors          *prometheus.CounterVec
	badHeaders      prometheus.Counter
	unsupported     prometheus.Counter
	invalid         prometheus.Counter
	submitRefused   prometheus.Counter
	orphanReplies   prometheus.Counter
	unauthenticated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_kafka_requests_total",
			Help: "Kafka requests read, by api.", ConstLabels: labels}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ringstream_kafka_errors_total",
			Help: "Kafka partition or topic errors answered, by api and Kafka error code.", ConstLabels: labels},
			[]string{"api", "code"}),
		badHeaders: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_bad_headers_total",
			Help: "Kafka requests whose header broke a rule: their connection was closed.", ConstLabels: labels}),
		unsupported: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_unsupported_total",
			Help: "Kafka requests of an api or version not served, answered UNSUPPORTED_VERSION.", ConstLabels: labels}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_invalid_total",
			Help: "Kafka requests whose body did not decode, answered INVALID_REQUEST.", ConstLabels: labels}),
		submitRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_submit_refused_total",
			Help:        "Client requests for Kafka requests refused by a full cross-shard queue (REQUEST_TIMED_OUT).",
			ConstLabels: labels}),
		orphanReplies: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_orphan_replies_total",
			Help: "Replies for no client request of the Kafka handler's.", ConstLabels: labels}),
		unauthenticated: prometheus.NewCounter(prometheus.CounterOpts{Name: "ringstream_kafka_unauthenticated_total",
			Help:        "Kafka requests before SASL authentication on a cluster with a secret: their connection was closed.",
			ConstLabels: labels}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.badHeaders, m.unsupported, m.invalid,
		m.submitRefused, m.orphanReplies, m.unauthenticated} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kafka: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) count(key int16) {
	m.requests.WithLabelValues(apiName(key)).Inc()
}

func (m *metrics) errorCode(key, code int16) {
	m.errors.WithLabelValues(apiName(key), strconv.Itoa(int(code))).Inc()
}

// apiName is the api label: kmsg's name of a known key, "other" for the rest (bounded labels).
func apiName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" {
		return name
	}
	return "other"
}
