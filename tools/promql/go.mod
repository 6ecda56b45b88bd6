// Module promql evaluates the chart's alert rules and dashboard with
// Prometheus's PromQL engine (make monitoring-check). It is apart from the
// tools module (tools/) because github.com/prometheus/prometheus v0.316.0
// would raise 49 of that module's requirements, among them what
// Kubernetes, helm and the driver compile: prometheus/client_golang
// v1.24.0 to v1.25.0, prometheus/common v0.70.0 to v0.72.1, grpc v1.83.1
// to v1.84.0, otel v1.45.0 to v1.47.0, golang.org/x/net v0.60.0 to v0.61.0
// (measured with go get in a copy of tools/): hack/check-modules.sh would
// fail, or the driver would have to follow Prometheus's versions.
module github.com/dra-driver-swap/dra-driver-swap/tools/promql

go 1.26.7

require (
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.1
	github.com/prometheus/prometheus v0.316.0
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dennwc/varint v1.0.0 // indirect
	github.com/edsrzf/mmap-go v1.2.1-0.20241212181136-fad1cd13edbd // indirect
	github.com/facette/natsort v0.0.0-20181210072756-2cd4dd1e2dcb // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/grafana/regexp v0.0.0-20250905093917-f7b3be9d1853 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
