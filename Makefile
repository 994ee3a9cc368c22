# FreeFlow. `make demo` and `make test` do all set-up on a fresh machine.
GO      ?= go
BIN     := bin
GOTEST_TIMEOUT ?= 30m
# The image the DaemonSet in deploy/ runs (made locally: `make image`).
IMAGE ?= freeflow.io/freeflow:0.1.0

.PHONY: all deps build lib image kubelab test test-go test-lib fuzz demo bench clean vet kube

all: build

deps:
	./scripts/install-deps.sh

build:
	$(GO) build -o $(BIN)/ ./cmd/...
	$(MAKE) -C lib
	# A new file, not the old one rewritten: containers map the old one (bind-mounted).
	cp lib/build/libfreeflow.so $(BIN)/libfreeflow.so.new && mv -f $(BIN)/libfreeflow.so.new $(BIN)/libfreeflow.so
	cp lib/build/libffv-rdmav34.so $(BIN)/libffv-rdmav34.so.new && mv -f $(BIN)/libffv-rdmav34.so.new $(BIN)/libffv-rdmav34.so
	$(MAKE) -C tools/ffmem
	cp tools/ffmem/build/ffmem $(BIN)/

lib:
	$(MAKE) -C lib

# Kubernetes v1.34.2's control plane and kubelet for the Kubernetes tests
# (docs/KUBERNETES.md); `deps` builds them too.
kube:
	./scripts/build-kube.sh

# FreeFlow's image for Kubernetes, as an OCI image layout tar:
# `ctr -n k8s.io images import bin/freeflow-image.tar` on every node. Static
# Go binaries (no shell, no libc in the image) and the two libraries, which
# `freeflowd install` only copies to the node.
image: lib
	rm -rf $(BIN)/image
	mkdir -p $(BIN)/image/freeflow
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/image/freeflow/ ./cmd/freeflowd ./cmd/freeflow-cni ./cmd/freeflow-runtime
	cp lib/build/libfreeflow.so lib/build/libffv-rdmav34.so $(BIN)/image/freeflow/
	$(GO) run ./tools/mkimage -name $(IMAGE) -rootfs $(BIN)/image -entrypoint /freeflow/freeflowd -o $(BIN)/freeflow-image.tar
	@echo "image $(IMAGE): $(BIN)/freeflow-image.tar (ctr -n k8s.io images import $(BIN)/freeflow-image.tar)"

# What the bench's Kubernetes experiments need besides the image: the
# static pause program of their nodes' pod sandboxes (internal/kubelab).
kubelab: image
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/freeflow-pause ./internal/kubelab/pause

vet:
	@test -z "$$(gofmt -l cmd internal tests tools deploy)" || { echo "gofmt needed on:"; gofmt -l cmd internal tests tools deploy; exit 1; }
	$(GO) vet ./...

# Unit, namespace and end-to-end tests (needs root: real namespaces, crun,
# etcd and CNI). A short fuzzing pass keeps the decoder honest.
test: deps build vet test-lib fuzz test-go

test-lib:
	$(MAKE) -C lib test
	$(MAKE) -C tools/ffmem check

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 15s ./internal/protocol

test-go:
	$(GO) test -count=1 -p 1 -timeout $(GOTEST_TIMEOUT) ./...

# Two hosts, containers talking same-host and cross-host, then the quick
# side-by-side benchmark.
demo: deps build
	./scripts/demo.sh

bench: build kubelab
	$(BIN)/freeflow bench

clean:
	rm -rf $(BIN)
	$(MAKE) -C lib clean
	$(MAKE) -C tools/ffmem clean
