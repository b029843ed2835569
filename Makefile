# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create (once) and reuse .venv; it is rebuilt when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo install uninstall test test-real lint typecheck layers unit proto bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,fast]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cdctl sim rack

# `cdctl` on your PATH: a link in $(PREFIX)/bin to this checkout's .venv/bin/cdctl (its shebang names the
# venv's python, so the link runs it with every dependency). `make uninstall` removes only that link.
PREFIX ?= $(HOME)/.local
install: $(STAMP)
	@mkdir -p $(PREFIX)/bin
	@ln -sfn $(abspath $(BIN))/cdctl $(PREFIX)/bin/cdctl
	@echo "installed: $(PREFIX)/bin/cdctl -> $(abspath $(BIN))/cdctl"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; \
	  *) echo "$(PREFIX)/bin is not on your PATH: add it, e.g. export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

uninstall:
	@if [ "$$(readlink $(PREFIX)/bin/cdctl)" = "$(abspath $(BIN))/cdctl" ]; then \
	  rm $(PREFIX)/bin/cdctl && echo "removed $(PREFIX)/bin/cdctl"; \
	else echo "$(PREFIX)/bin/cdctl is not this checkout's link: left alone"; fi

test: lint typecheck layers unit

lint: $(STAMP)
	$(BIN)/ruff check cdctl tests bench
	$(BIN)/ruff format --check cdctl tests bench

typecheck: $(STAMP)
	$(BIN)/mypy cdctl

layers: $(STAMP)
	$(BIN)/lint-imports

# Three worker processes (pytest-xdist): on two cores the suite takes 6 minutes instead of 11 (the rack tests
# mostly wait on their processes). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
unit: $(STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS)

# The real tier: our scenarios on a real v1.36 control plane and real kubelets (../shared/realk8s, built
# once; docs/real-tier.md). Skips with one line saying what is missing when the kit is not built.
test-real: $(STAMP)
	$(BIN)/pytest -q -rs -m real tests/real

# Regenerates cdctl/_proto from proto/ (the generated code is committed).
proto: $(STAMP)
	rm -rf cdctl/_proto/k8s cdctl/_proto/pluginregistration cdctl/_proto/message_pool.py
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -Iproto \
	  --plugin=protoc-gen-python_betterproto2=$(BIN)/protoc-gen-python_betterproto2 \
	  --python_betterproto2_out=cdctl/_proto \
	  --python_betterproto2_opt=client_generation=async,server_generation=async \
	  $$(find proto -name '*.proto' | sort)
	git checkout -- cdctl/_proto/__init__.py 2>/dev/null || true
	$(BIN)/ruff format cdctl/_proto >/dev/null

bench: $(STAMP)
	$(BIN)/python bench/store.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
