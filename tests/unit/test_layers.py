"""The layers of varmq, held against the imports of its source (docs/architecture.md).

The core is in subpackages by layer, each importing only the layers below it, imports made
only for type checking and inside functions included: ``contract`` (standard library only,
the one part an adapter imports), ``model``, ``topics``, ``sources``, ``engine`` (which sees a
bound queue through the source interface only), ``api`` and ``ops``. Above them stand the
modules users import by name (``varmq`` and its public modules); ``varmq.testing`` builds on
those and on the contract. A new import that points up, or makes a cycle, fails here.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.imports import Graph, cycles, longest_chain, read_graph

LAYERS = (
    "varmq.contract",
    "varmq.model",
    "varmq.topics",
    "varmq.sources",
    "varmq.engine",
    "varmq.api",
    "varmq.tasks",
    "varmq.ops",
)
# What the engine may see of the sources: the interface, and the record of lock-free takes.
ENGINE_SEES = {"varmq.sources.base", "varmq.sources.taken"}
# The most modules that may stand directly under varmq/, beside its subpackages.
TOP_MODULES = 12
# The longest chain of imports made when a module is imported.
DEPTH = 10


@pytest.fixture(scope="module")
def graph() -> Graph:
    return read_graph()


def _layer(module: str) -> int:
    """The rank of ``module``'s layer: its subpackage's, or above them all for the modules users
    import by name (``varmq``, ``varmq.errors``, ...), and above those for ``varmq.testing``."""
    for rank, package in enumerate(LAYERS):
        if module == package or module.startswith(f"{package}."):
            return rank
    return len(LAYERS) + (1 if module.startswith("varmq.testing") else 0)


def _core(graph: Graph) -> set[str]:
    return {m for m in graph.files if m == "varmq" or m.startswith("varmq.")}


def test_no_module_of_varmq_imports_another_that_imports_it_back(graph: Graph) -> None:
    assert cycles(graph, _core(graph)) == []


def test_each_layer_imports_only_the_layers_below_it(graph: Graph) -> None:
    upward = sorted(
        f"{a} -> {b} ({', '.join(sorted(kinds))})"
        for (a, b), kinds in graph.edges.items()
        if a in _core(graph) and b in _core(graph) and _layer(b) > _layer(a)
    )
    assert upward == []


def test_the_engine_sees_a_bound_queue_through_the_source_interface_only(graph: Graph) -> None:
    seen = {
        (a, b)
        for (a, b) in graph.edges
        if a.startswith("varmq.engine") and b.startswith("varmq.sources")
    }
    assert {b for _, b in seen} <= ENGINE_SEES, sorted(seen)


def test_the_contract_needs_nothing_but_the_standard_library(graph: Graph) -> None:
    contract = {m for m in graph.files if m.startswith("varmq.contract")}
    beyond = {
        m: sorted(names - set(sys.stdlib_module_names) - {"__future__"})
        for m, names in graph.outside.items()
        if m in contract
    }
    assert {m: names for m, names in beyond.items() if names} == {}
    inside = {b for (a, b) in graph.edges if a in contract}
    assert inside <= contract


@pytest.mark.parametrize("adapter", ["sqliteq", "redisq"])
def test_an_adapter_imports_nothing_of_varmq_but_its_contract(graph: Graph, adapter: str) -> None:
    used = {
        b
        for (a, b) in graph.edges
        if (a == adapter or a.startswith(f"{adapter}.")) and b.split(".")[0] == "varmq"
    }
    assert used, "the adapter should use the contract rather than copy it"
    assert {b for b in used if not b.startswith("varmq.contract")} == set()


def test_the_core_imports_no_adapter(graph: Graph) -> None:
    adapters = ("sqliteq", "redisq")
    assert {
        (a, b) for (a, b) in graph.edges if a in _core(graph) and b.startswith(adapters)
    } == set()


def test_the_testing_package_builds_on_public_names_and_the_contract(graph: Graph) -> None:
    testing = {m for m in graph.files if m.startswith("varmq.testing")}
    private = sorted(
        f"{a} -> {b}"
        for (a, b) in graph.edges
        if a in testing and b != "varmq" and not b.startswith(("varmq.testing", "varmq.contract"))
    )
    assert private == []


def test_no_chain_of_imports_is_deeper_than_ten_modules(graph: Graph) -> None:
    chain = longest_chain(graph, set(graph.files))
    assert len(chain) <= DEPTH, " -> ".join(chain)


def test_few_modules_stand_directly_under_varmq_the_rest_in_layers(graph: Graph) -> None:
    top = sorted(
        m
        for m, path in graph.files.items()
        if m.startswith("varmq.") and m.count(".") == 1 and path.name != "__init__.py"
    )
    assert len(top) <= TOP_MODULES, top
    packages = {m for m, path in graph.files.items() if path.name == "__init__.py"}
    assert set(LAYERS) <= packages
