# Shortcuts for run.py, which needs nothing but Python (see README.md):
#   make demo   ==  python3 run.py demo
#   make test   ==  python3 run.py test
#   make bench  ==  python3 run.py bench

PYTHON ?= python3

.PHONY: test demo bench clean

test:
	$(PYTHON) run.py test

demo:
	$(PYTHON) run.py demo

bench:
	$(PYTHON) run.py bench

clean:
	rm -rf .venv build *.egg-info
