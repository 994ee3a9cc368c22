# FreeFlow. `make demo` and `make test` do all set-up on a fresh machine.
GO      ?= go
BIN     := bin
GOTEST_TIMEOUT ?= 30m

.PHONY: all deps build lib test test-go test-lib fuzz demo bench clean vet kube

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

vet:
	@test -z "$$(gofmt -l cmd internal tests)" || { echo "gofmt needed on:"; gofmt -l cmd internal tests; exit 1; }
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

bench: build
	$(BIN)/freeflow bench

clean:
	rm -rf $(BIN)
	$(MAKE) -C lib clean
	$(MAKE) -C tools/ffmem clean
