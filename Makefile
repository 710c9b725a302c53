# One command installs and runs the main job on the demo set; one runs the tests.
#   make demo    # creates .venv, installs hackscan (CPU torch), audits kernels/
#   make test    # the test suite (what CI runs)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	# torch first, pinned: the CPU build on this disk; a plain requirement pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dynamic,clang,dev]"

demo: install
	$(VENV)/bin/hackscan kernels/

test:
	$(PY) -m pytest -q

bench:
	$(PY) benchmarks/static_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
