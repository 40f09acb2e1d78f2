"""The task argument codec (varmq.tasks.arguments): calls to JSON and back by the annotations.

This module uses ``from __future__ import annotations`` on purpose: every annotation below is a
string that the codec has to resolve.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import logging
import math
import pathlib
import subprocess
import sys
import textwrap
import typing
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, NewType, Optional, Union

import pytest
from typing_extensions import NotRequired, TypedDict

from varmq.tasks.arguments import TaskSignature, to_json_value

if TYPE_CHECKING:
    from decimal import Decimal as OnlyWhileTypeChecking


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Corner(enum.Enum):
    TOP_LEFT = (0, 0)
    BOTTOM_RIGHT = (1, 1)


@dataclasses.dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str = "EUR"


@dataclasses.dataclass
class Line:
    sku: uuid.UUID
    price: Money
    color: Color
    shipped: date | None = None
    tags: set[str] = dataclasses.field(default_factory=set)
    total: Decimal = dataclasses.field(init=False, default=Decimal(0))

    def __post_init__(self) -> None:
        self.total = self.price.amount * 2


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


class Address(TypedDict):
    city: str
    since: date
    moved: NotRequired[datetime]


class Customer(TypedDict):
    name: str
    addresses: list[Address]


class Point(NamedTuple):
    x: Decimal
    y: Decimal


UserId = NewType("UserId", str)
Deadline = NewType("Deadline", datetime)


class Sku(str):
    def __str__(self) -> str:
        return f"Sku({super().__str__()})"


ROOT = pathlib.Path(__file__).resolve().parents[2]


def roundtrip(
    fn: typing.Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Encode a call, pass it through strict JSON as a job would, and decode it."""
    sig = TaskSignature("t", fn)
    encoded = sig.encode_call(args, kwargs)
    stored = json.loads(json.dumps({"args": encoded[0], "kwargs": encoded[1]}, allow_nan=False))
    return sig.decode_call(stored["args"], stored["kwargs"])


def result_roundtrip(fn: typing.Callable[..., Any], value: Any) -> Any:
    sig = TaskSignature("t", fn)
    return sig.decode_result(json.loads(json.dumps(sig.encode_result(value), allow_nan=False)))


def plain(a: str, b: int, c: float = 1.5, *, d: bool = False) -> None:
    pass


def charge(customer: str, amount: Decimal, when: datetime, note: str = "") -> None:
    pass


def test_plain_values_pass_unchanged_and_keep_their_positions() -> None:
    sig = TaskSignature("t", plain)
    assert sig.encode_call(("x", 1), {}) == (["x", 1], {})
    assert sig.encode_call(("x",), {"b": 2, "d": True}) == (["x"], {"b": 2, "d": True})
    assert sig.encode_call(("x", 1, 2.5), {}) == (["x", 1, 2.5], {})
    assert sig.decode_call(["x", 1], {"d": True}) == (("x", 1), {"d": True})
    # Not a type checker: an int for a str parameter is JSON all the same.
    assert sig.encode_call((5, 1), {}) == ([5, 1], {})


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("a",), {}, "missing a required argument: 'amount'"),
        (("a", 1, datetime.now(), "n", "extra"), {}, "too many positional arguments"),
        (("a", 1, datetime.now()), {"colour": 1}, "got an unexpected keyword argument 'colour'"),
        (("a", 1, datetime.now()), {"customer": "b"}, "multiple values for argument 'customer'"),
    ],
)
def test_calls_the_function_would_refuse_name_the_task(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: str
) -> None:
    sig = TaskSignature("billing.charge", charge)
    with pytest.raises(TypeError) as caught:
        sig.encode_call(args, kwargs)
    assert str(caught.value) == f"task 'billing.charge': {expected}"


def test_a_missing_keyword_only_argument_is_refused() -> None:
    def needs(a: int, *, b: int) -> None:
        pass

    with pytest.raises(TypeError, match="task 't': missing a required argument: 'b'"):
        TaskSignature("t", needs).encode_call((1,), {})


def _f1(a: int, b: int, c: int = 1) -> None:
    pass


def _f2(a: int, /, b: int, *, c: int, d: int = 1) -> None:
    pass


def _f3(a: int, b: int = 1, *rest: int, c: int, **kw: int) -> None:
    pass


def _f4(a: int, /, b: int = 2, **kw: int) -> None:
    pass


def _f5() -> None:
    pass


@pytest.mark.parametrize("fn", [_f1, _f2, _f3, _f4, _f5, plain])
def test_calls_are_accepted_exactly_when_python_would_bind_them(
    fn: typing.Callable[..., None],
) -> None:
    sig, python = TaskSignature("t", fn), inspect.signature(fn)
    names = ["a", "b", "c", "d", "x"]
    for n in range(6):
        for mask in range(2 ** len(names)):
            args = tuple(range(n))
            kwargs = {name: 9 for i, name in enumerate(names) if mask >> i & 1}
            try:
                python.bind(*args, **kwargs)
            except TypeError:
                with pytest.raises(TypeError, match=r"^task 't': "):
                    sig.encode_call(args, kwargs)
            else:
                assert sig.encode_call(args, kwargs) == (list(args), kwargs)


def test_scalars_round_trip_by_annotation() -> None:
    def fn(
        when: datetime, day: date, at: time, key: uuid.UUID, cost: Decimal, color: Color, lvl: Level
    ) -> None:
        pass

    values = (
        datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2))),
        date(2024, 2, 29),
        time(23, 59, 1, 5),
        uuid.uuid4(),
        Decimal("12.3400"),
        Color.GREEN,
        Level.HIGH,
    )
    sig = TaskSignature("t", fn)
    encoded, _ = sig.encode_call(values, {})
    assert encoded == [
        "2024-05-06T07:08:09.123456+02:00",
        "2024-02-29",
        "23:59:01.000005",
        str(values[3]),
        "12.3400",
        "green",
        2,
    ]
    args, kwargs = roundtrip(fn, *values)
    assert args == values and kwargs == {}
    assert [type(a) for a in args] == [type(v) for v in values]
    assert str(args[4]) == "12.3400"  # the exact Decimal, not a float's approximation


def test_keyword_arguments_round_trip_by_their_parameter() -> None:
    args, kwargs = roundtrip(charge, "acme", amount=Decimal("9.99"), when=datetime(2024, 1, 1))
    assert args == ("acme",)
    assert kwargs == {"amount": Decimal("9.99"), "when": datetime(2024, 1, 1)}


def test_an_enum_whose_value_json_changes_still_round_trips() -> None:
    def fn(corner: Corner) -> None:
        pass

    assert roundtrip(fn, Corner.BOTTOM_RIGHT) == ((Corner.BOTTOM_RIGHT,), {})


def test_containers_round_trip_by_annotation() -> None:
    def fn(
        days: list[date],
        pair: tuple[str, datetime],
        many: tuple[Decimal, ...],
        keys: set[uuid.UUID],
        levels: frozenset[Level],
        prices: dict[str, Decimal],
        by_color: dict[Color, list[int]],
        nested: list[dict[str, tuple[date, ...]]],
    ) -> None:
        pass

    values = (
        [date(2024, 1, 1), date(2024, 1, 2)],
        ("a", datetime(2024, 1, 1, 12)),
        (Decimal("1.1"), Decimal("2.2")),
        {uuid.uuid4(), uuid.uuid4()},
        frozenset({Level.LOW}),
        {"x": Decimal("0.5")},
        {Color.RED: [1, 2]},
        [{"k": (date(2020, 1, 1),)}],
    )
    args, _ = roundtrip(fn, *values)
    assert args == values
    assert type(args[1]) is tuple and type(args[3]) is set and type(args[4]) is frozenset
    assert list(args[6]) == [Color.RED]


def test_untyped_containers_become_lists_and_dicts() -> None:
    def fn(a: Any, b, c: list[str]) -> None:  # type: ignore[no-untyped-def]
        pass

    sig = TaskSignature("t", fn)
    encoded, _ = sig.encode_call(((1, 2), {3, 4}, ["x"]), {})
    assert encoded[0] == [1, 2] and sorted(encoded[1]) == [3, 4] and encoded[2] == ["x"]
    assert sig.decode_call(encoded, {}) == (([1, 2], encoded[1], ["x"]), {})


def test_dataclasses_round_trip_with_nested_types() -> None:
    def fn(line: Line, lines: list[Line], money: Money | None = None) -> Money:
        return Money(Decimal(0))

    line = Line(uuid.uuid4(), Money(Decimal("3.50")), Color.RED, date(2024, 3, 1), {"a", "b"})
    other = Line(uuid.uuid4(), Money(Decimal("1"), "USD"), Color.GREEN)
    sig = TaskSignature("t", fn)
    encoded, _ = sig.encode_call((line, [other]), {"money": Money(Decimal("2"))})
    assert encoded[0]["price"] == {"amount": "3.50", "currency": "EUR"}
    assert encoded[0]["total"] == "7.00"  # every field, as dataclasses.asdict() has it
    args, kwargs = roundtrip(fn, line, [other], money=Money(Decimal("2")))
    assert args == (line, [other]) and kwargs == {"money": Money(Decimal("2"))}
    assert args[0].total == Decimal("7.00") and isinstance(args[0].price, Money)
    assert result_roundtrip(fn, Money(Decimal("4.2"), "GBP")) == Money(Decimal("4.2"), "GBP")


def test_a_dataclass_that_contains_itself() -> None:
    def fn(tree: Node) -> None:
        pass

    tree = Node("root", [Node("a", [Node("a1")]), Node("b")])
    (got,), _ = roundtrip(fn, tree)
    assert got == tree and isinstance(got.children[0].children[0], Node)


def test_typed_dicts_round_trip_with_nested_types() -> None:
    def fn(customer: Customer) -> None:
        pass

    customer: Customer = {
        "name": "n",
        "addresses": [
            {"city": "c", "since": date(2020, 1, 1)},
            {"city": "d", "since": date(2021, 1, 1), "moved": datetime(2022, 1, 1, 5)},
        ],
    }
    assert roundtrip(fn, customer) == ((customer,), {})


def test_a_typed_dict_missing_a_required_key_is_refused() -> None:
    def fn(address: Address) -> None:
        pass

    with pytest.raises(TypeError, match=r"argument 'address': Address lacks \['since'\]"):
        TaskSignature("t", fn).decode_call([{"city": "c"}], {})


def test_named_tuples_new_types_and_str_subclasses_round_trip() -> None:
    def fn(point: Point, user: UserId, due: Deadline, sku: Sku) -> None:
        pass

    values = (Point(Decimal("1.5"), Decimal("2")), UserId("u1"), Deadline(datetime(2024, 1, 1)))
    encoded, _ = TaskSignature("t", fn).encode_call((*values, Sku("a1")), {})
    assert encoded == [["1.5", "2"], "u1", "2024-01-01T00:00:00", "a1"]
    assert type(encoded[3]) is str  # the str itself, not what the subclass's __str__ says
    args, _ = roundtrip(fn, *values, Sku("a1"))
    assert args == (*values, "a1")
    assert type(args[0]) is Point and type(args[2]) is datetime and type(args[3]) is Sku
    with pytest.raises(TypeError, match=r"argument 'point': expected a list of 2 for Point"):
        TaskSignature("t", fn).decode_call([["1"], "u", "2024-01-01", "s"], {})


def test_optional_and_union_try_their_members_in_order() -> None:
    def fn(
        maybe: Optional[datetime],  # noqa: UP045
        either: Union[int, date],  # noqa: UP007
        new_style: uuid.UUID | None,
        first_wins: str | date,
        lit: Literal["a", "b"] | Decimal,
    ) -> None:
        pass

    key = uuid.uuid4()
    assert roundtrip(fn, None, 3, key, "2024-01-01", "b") == ((None, 3, key, "2024-01-01", "b"), {})
    values = (datetime(2024, 1, 1), date(2024, 1, 2), None, date(2024, 1, 3), Decimal("1"))
    assert roundtrip(fn, *values) == ((*values[:3], "2024-01-03", Decimal("1")), {})
    with pytest.raises(TypeError, match=r"argument 'either': 'x' matches none of int \| date"):
        TaskSignature("t", fn).decode_call([None, "x", None, "", "a"], {})
    with pytest.raises(TypeError, match=r"argument 'either': None matches none of int \| date"):
        TaskSignature("t", fn).decode_call([None, None, None, "", "a"], {})


def test_a_parameter_defaulting_to_none_accepts_none() -> None:
    def fn(when: datetime = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
        pass

    assert roundtrip(fn, None) == ((None,), {})
    assert roundtrip(fn, datetime(2024, 1, 1)) == ((datetime(2024, 1, 1),), {})


def test_annotated_literal_and_any() -> None:
    def fn(when: Annotated[datetime, "meta"], mode: Literal["on", Color.RED], raw: Any) -> None:
        pass

    values = (datetime(2024, 1, 1), Color.RED, {"when": "2024-01-01"})
    assert roundtrip(fn, *values) == (values, {})
    assert roundtrip(fn, datetime(2024, 1, 1), "on", 1)[0][1] == "on"
    with pytest.raises(ValueError, match=r"argument 'mode': 'off' is not one of 'on', <Color\.RED"):
        TaskSignature("t", fn).decode_call(["2024-01-01", "off", None], {})


def test_star_args_and_star_kwargs_rebuild_each_item() -> None:
    def fn(first: int, *days: date, **keys: uuid.UUID) -> None:
        pass

    key = uuid.uuid4()
    args, kwargs = roundtrip(fn, 1, date(2024, 1, 1), date(2024, 1, 2), a=key)
    assert args == (1, date(2024, 1, 1), date(2024, 1, 2)) and kwargs == {"a": key}
    with pytest.raises(ValueError, match=r"task 't', argument 'days'\[1\]: cannot rebuild a date"):
        TaskSignature("t", fn).decode_call([1, "2024-01-01", "nope"], {})
    with pytest.raises(TypeError, match=r"task 't', argument 'days'\[0\]: a bytes has no JSON"):
        TaskSignature("t", fn).encode_call((1, b"x"), {})
    with pytest.raises(TypeError, match="task 't', argument 'b': an object has no JSON form"):
        TaskSignature("t", fn).encode_call((1,), {"b": object()})


def test_positional_only_names_may_reach_star_kwargs() -> None:
    def fn(a: date, /, **rest: date) -> None:
        pass

    args, kwargs = roundtrip(fn, date(2024, 1, 1), a=date(2024, 1, 2))
    assert args == (date(2024, 1, 1),) and kwargs == {"a": date(2024, 1, 2)}


def test_names_that_only_exist_while_type_checking_mean_no_conversion() -> None:
    def fn(a: OnlyWhileTypeChecking, when: datetime) -> None:
        pass

    sig = TaskSignature("t", fn)  # registration does not fail
    assert sig.decode_call(["1.5", "2024-01-01T00:00:00"], {}) == (
        ("1.5", "2024-01-01T00:00:00"),
        {},
    )


def test_annotations_that_cannot_be_resolved_are_reported_once_at_registration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def unresolved(a: OnlyWhileTypeChecking) -> None:
        pass

    def resolved(a: datetime) -> None:
        pass

    with caplog.at_level(logging.WARNING, logger="varmq.tasks"):
        sig = TaskSignature("send", unresolved)
        TaskSignature("fine", resolved)
        sig.decode_call(["1.5"], {})  # calls report nothing more
        sig.encode_call(("1.5",), {})

    assert [(r.name, r.levelno) for r in caplog.records] == [("varmq.tasks", logging.WARNING)]
    message = caplog.records[0].getMessage()
    assert "task 'send'" in message
    assert "NameError" in message and "OnlyWhileTypeChecking" in message


def test_annotations_that_are_objects_still_count_when_others_do_not_resolve() -> None:
    def fn(a, when):  # type: ignore[no-untyped-def]
        pass

    fn.__annotations__ = {"a": "NoSuchName", "when": datetime}
    sig = TaskSignature("t", fn)
    assert sig.decode_call(["x", "2024-01-01T00:00:00"], {}) == (("x", datetime(2024, 1, 1)), {})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"x", "argument 'when': a bytes has no JSON form"),
        (object(), "argument 'when': an object has no JSON form"),
        (math.nan, "argument 'when': the float nan has no JSON form"),
        (-math.inf, "argument 'when': the float -inf has no JSON form"),
        (len, "argument 'when': a builtin_function_or_method has no JSON form"),
        (lambda: 1, "argument 'when': a function has no JSON form"),
        ({1: "a"}, "argument 'when': the dict key 1 has no JSON form (keys must be str)"),
        ([1, 2, b"x"], "argument 'when'[2]: a bytes has no JSON form"),
        ({"a": [{"b": math.inf}]}, "argument 'when'['a'][0]['b']: the float inf has no JSON"),
        (Money(b"x"), "argument 'when'.amount: a bytes has no JSON form"),  # type: ignore[arg-type]
    ],
)
def test_values_with_no_json_form_name_the_task_and_the_argument(value: Any, message: str) -> None:
    sig = TaskSignature("billing.charge", charge)
    with pytest.raises(TypeError) as caught:
        sig.encode_call(("acme", Decimal(1)), {"when": value})
    assert str(caught.value).startswith(f"task 'billing.charge', {message}")
    with pytest.raises(TypeError) as positional:
        sig.encode_call(("acme", Decimal(1), value), {})
    assert str(positional.value).startswith(f"task 'billing.charge', {message}")


def test_a_list_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(TypeError, match=r"argument 'a'.*contain itself"):
        TaskSignature("t", plain).encode_call((loop, 1), {})


@pytest.mark.parametrize(
    ("fn_args", "error", "message"),
    [
        (["a", "1", "not-a-date"], ValueError, "argument 'when': cannot rebuild a datetime from"),
        (["a", "1", 5], TypeError, "argument 'when': expected a datetime as a string, got an int"),
        (["a", "x!", "2024-01-01"], ValueError, "argument 'amount': cannot rebuild a Decimal"),
    ],
)
def test_values_that_cannot_be_rebuilt_name_the_task_and_the_argument(
    fn_args: list[Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        TaskSignature("billing.charge", charge).decode_call(fn_args, {})
    assert str(caught.value).startswith(f"task 'billing.charge', {message}")


def test_nested_values_that_cannot_be_rebuilt_say_where() -> None:
    def fn(lines: list[Line], color: Color) -> None:
        pass

    sig = TaskSignature("t", fn)
    line = {"sku": str(uuid.uuid4()), "price": {"amount": "1"}, "color": "red"}
    bad = {**line, "price": {"amount": "1", "currency": "EUR", "rate": 2}}
    with pytest.raises(TypeError, match=r"argument 'lines'\[1\]\.price: cannot rebuild Money"):
        sig.decode_call([[line, bad], "red"], {})
    with pytest.raises(ValueError, match=r"argument 'lines'\[0\]\.color: 'blue' is not a value"):
        sig.decode_call([[{**line, "color": "blue"}], "red"], {})
    with pytest.raises(ValueError, match="argument 'color': 'blue' is not a value of Color"):
        sig.decode_call([[line], "blue"], {})


def test_stored_arguments_of_the_wrong_shape_name_the_task() -> None:
    sig = TaskSignature("billing.charge", charge)
    with pytest.raises(TypeError, match=r"task 'billing\.charge': args must be a list"):
        sig.decode_call({"customer": "a"}, {})
    with pytest.raises(TypeError, match=r"task 'billing\.charge': kwargs must be a dict"):
        sig.decode_call([], ["a"])
    with pytest.raises(TypeError, match=r"task 't', argument 'n'.*expected a list"):
        TaskSignature("t", _takes_dates).decode_call([{"a": 1}], {})


def _takes_dates(n: list[date]) -> list[date]:
    return n


def test_results_round_trip_by_the_return_annotation() -> None:
    async def fetch() -> datetime:
        return datetime.now()

    def nothing() -> None:
        pass

    def unannotated():  # type: ignore[no-untyped-def]
        pass

    assert result_roundtrip(fetch, datetime(2024, 1, 1, 1)) == datetime(2024, 1, 1, 1)
    assert result_roundtrip(_takes_dates, [date(2024, 1, 1)]) == [date(2024, 1, 1)]
    assert result_roundtrip(nothing, None) is None
    assert result_roundtrip(unannotated, (1, "a")) == [1, "a"]
    with pytest.raises(TypeError, match=r"task 't', its return value\[0\]: a bytes has no JSON"):
        TaskSignature("t", nothing).encode_result([b"x"])
    with pytest.raises(ValueError, match="task 't', its return value: cannot rebuild a datetime"):
        TaskSignature("t", fetch).decode_result("soon")


def test_to_json_value_converts_without_annotations() -> None:
    key = uuid.uuid4()
    value = {"when": datetime(2024, 1, 1), "k": key, "m": Money(Decimal("1")), "t": (Color.RED,)}
    assert to_json_value(value) == {
        "when": "2024-01-01T00:00:00",
        "k": str(key),
        "m": {"amount": "1", "currency": "EUR"},
        "t": ["red"],
    }
    assert to_json_value("s") == "s" and to_json_value(None) is None
    with pytest.raises(TypeError, match=r"a bytes has no JSON form \(at \['a'\]\[1\]\)"):
        to_json_value({"a": [1, b"x"]})


def test_pydantic_models_round_trip() -> None:
    pd = pytest.importorskip("pydantic")

    class Order(pd.BaseModel):  # type: ignore[misc, name-defined]
        when: datetime
        amount: Decimal

    def fn(order: Any, orders: Any) -> Any:
        return order

    # Order is local to this test, which string annotations cannot name: give the objects.
    fn.__annotations__ = {"order": Order, "orders": list[Order], "return": Order}

    order = Order(when=datetime(2024, 1, 1), amount=Decimal("2.5"))
    sig = TaskSignature("t", fn)
    encoded, _ = sig.encode_call((order, [order]), {})
    assert encoded[0] == {"when": "2024-01-01T00:00:00", "amount": "2.5"}
    assert roundtrip(fn, order, [order]) == ((order, [order]), {})
    assert result_roundtrip(fn, order) == order
    with pytest.raises(ValueError, match="argument 'order': cannot rebuild Order"):
        sig.decode_call([{"when": "never", "amount": "1"}, []], {})


def test_pydantic_is_never_imported_by_the_codec() -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from dataclasses import dataclass
        from datetime import datetime
        from varmq.tasks.arguments import TaskSignature, to_json_value

        assert "pydantic" not in sys.modules, "imported before the codec was used"

        @dataclass
        class Box:
            when: datetime

        def fn(box: Box, items: list[datetime] | None = None) -> Box:
            return box

        sig = TaskSignature("t", fn)
        args, kwargs = sig.encode_call((Box(datetime(2024, 1, 1)),), {"items": []})
        sig.decode_call(*json.loads(json.dumps([args, kwargs])))
        sig.decode_result(sig.encode_result(Box(datetime(2024, 1, 1))))
        to_json_value(Box(datetime(2024, 1, 1)))
        for bad in (object(), b"x"):
            try:
                sig.encode_call((bad,), {})
            except TypeError:
                pass
        print("pydantic" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
