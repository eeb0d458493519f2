# agentbox build and test entry points. The README's two commands are
# `make up` (install everything, build, start, demo) and `make test`.
GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/agentbox/agentbox/internal/version.Version=$(VERSION)

.PHONY: build install deps up test test-unit test-integration bench soak clean lint

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox ./cmd/agentbox
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox-guest ./cmd/agentbox-guest

install: build
	install -D -m 0755 $(BIN)/agentbox /usr/local/bin/agentbox
	install -D -m 0755 $(BIN)/agentbox-guest /usr/local/lib/agentbox/agentbox-guest

deps:
	scripts/install-deps.sh

up:
	scripts/setup.sh

test:
	scripts/test.sh

test-unit:
	$(GO) test ./...

lint:
	$(GO) vet ./...
	test -z "$$(gofmt -l .)"

clean:
	rm -rf $(BIN)
