"""Test support for adapter authors: a reference storage and the conformance suite."""
