# One command installs and runs the main job on the demo set; one runs the tests.
#   make demo       # creates .venv, installs hackscan (CPU torch), audits kernels/
#   make test       # the test suite (what CI runs, after make lint)
#   make test-fast  # the quick loop: static tests only (no sandbox, dynamic stage, compiler or browser)
#   make lint       # ruff under pyproject's [tool.ruff] (CI runs it)
VENV ?= .venv
PY := $(VENV)/bin/python
# The venv's interpreter.  The static stage is pure Python, so the interpreter's build sets its
# speed: Debian's /usr/bin/python3 (3.11, built with PGO and LTO, libpython linked into the
# executable) scans the CUDA-L1 corpus 10-20 % faster than pyenv's default build of 3.11 (no PGO,
# libpython as a shared library) on the development machine (docs/measured.md).  It is used when
# it is 3.11 or newer and can make a venv (ensurepip present); `make install PYTHON=python3.12`
# picks another.
SYSTEM_PY := $(shell /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo /usr/bin/python3)
PYTHON ?= $(or $(SYSTEM_PY),python3)

# pipefail: a recipe piped through a filter (QUIET_PIP) fails when the command before the pipe fails
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

# pip at -q still prints a warning for each file:// extra index that lacks a folder for a project
# ("Location 'file:///...' is ignored: it is neither a file nor a directory"): a pip config on
# some machines lists such indexes, and an install here printed about 40 of them.  Only that
# exact line is dropped; errors and every other warning still show, and pip's exit status is kept.
QUIET_PIP = 2>&1 | { grep -v "^WARNING: Location 'file://.*' is ignored: it is neither a file nor a directory\.$$" || true; }

.PHONY: install sandbox-tools demo test test-fast lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import sys; print("venv on", sys.version.split()[0], sys.base_prefix)'
	@$(PY) -m pip install -q --upgrade pip $(QUIET_PIP)

# the recipes are silent (@) and say what they do in one line each: echoed, they printed the pip
# filter above on every install
install: $(PY) sandbox-tools
	@# torch first, pinned: the CPU build on this disk; a plain requirement pulls a multi-GB CUDA build
	@echo "installing torch 2.13.0 (CPU build) into $(VENV)"
	@$(PY) -m pip install -q torch==2.13.0 $(QUIET_PIP)
	@echo "installing hackscan (editable) with its dynamic, clang, dev and ray extras"
	@$(PY) -m pip install -q -e ".[dynamic,clang,dev,ray]" $(QUIET_PIP)

# bubblewrap and libseccomp (Debian/Ubuntu packages): every process that runs candidate code is
# sandboxed with bwrap under a syscall filter (pyseccomp, from the dynamic extra, loads the system's
# libseccomp.so.2); --sandbox required refuses to run without either
sandbox-tools:
	@{ command -v bwrap >/dev/null 2>&1 && { ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 '; }; } || { \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends bubblewrap libseccomp2 >/dev/null; \
	  else echo "hackscan: install bubblewrap (bwrap) and libseccomp with your package manager; the dynamic stage needs them"; fi; }

# The demo set holds hacks on purpose, so hackscan exits 1 on it, as it should in CI: the demo
# prints the report, then says what that exit code means, and succeeds.  Exit 2 (a usage or internal
# error) still fails it.
demo: install
	@$(VENV)/bin/hackscan kernels/; rc=$$?; \
	case $$rc in \
	  0) echo "hackscan: exit code 0: nothing reached --fail-on; in CI or as a gate this run passes" ;; \
	  1) echo "hackscan: exit code 1: findings reached --fail-on (the demo's hacks); in CI or as a gate this run fails, the demo does not" ;; \
	  *) echo "hackscan: exit code $$rc: the run itself failed" >&2; exit $$rc ;; \
	esac

# one test worker per core (pytest-xdist): most of the suite waits on compilers and sandboxed
# workers that use one core each; the Ray tests share one worker (tests/conftest.py)
test:
	$(PY) -m pytest -q -n auto --dist loadgroup

# tests/conftest.py marks the modules that run candidates, compile or start process pools
# ``dynamic``; about 1140 of the 1560 tests remain, some 40 s of CPU (docs/usage.md, "Installing and running")
test-fast:
	$(PY) -m pytest -q -m "not slow and not gpu and not dynamic"

# the folders are pyproject's [tool.ruff] include list; fixtures/ is excluded there
lint:
	$(VENV)/bin/ruff check

bench:
	$(PY) benchmarks/static_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
