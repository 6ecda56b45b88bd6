// Module images builds dra-swap-images (`make image-tool`), which builds
// the driver's and the e2e tests' images, pushes them and serves a
// registry for the test clusters. It is a module of its own so that
// go-containerregistry and docker/cli stay out of the driver's go.mod, and
// apart from tools/, whose Kubernetes and helm versions they would move.
// For every package it shares with the driver's module it requires the
// driver's version (hack/check-modules.sh).
module github.com/dra-driver-swap/dra-driver-swap/tools/images

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
