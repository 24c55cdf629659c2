"""``--opt KEY=VALUE`` parsing (``a2acc.options``)."""

from __future__ import annotations

import pytest

from a2acc.errors import InputError
from a2acc.options import split_pairs


@pytest.mark.parametrize(
    ("items", "pairs"),
    [
        (["dialect=rccl"], [("dialect", "rccl")]),
        (["dialect=rccl,instances=2"], [("dialect", "rccl"), ("instances", "2")]),
        # a list value reads as written (it was split and refused: "use KEY=VALUE")
        (["dtypes=int8,float16"], [("dtypes", "int8,float16")]),
        (["dtypes=int8, float16 ,proto=LL"], [("dtypes", "int8,float16"), ("proto", "LL")]),
        (["a=1", "b=x,y"], [("a", "1"), ("b", "x,y")]),
        ([",x=1"], [("x", "1")]),
    ],
)
def test_pairs_and_list_values(items, pairs):
    assert split_pairs(items) == pairs


@pytest.mark.parametrize("items", [["bogus"], ["a=1", "bogus"], ["=1"]])
def test_a_part_without_a_key_is_refused_where_no_value_precedes_it(items):
    with pytest.raises(InputError):
        split_pairs(items)


@pytest.mark.parametrize("items", [["shape=staged,shape=direct"], ["a=1", "a=2"]])
def test_an_option_given_twice_is_refused(items):
    """The last value silently won: ``shape=staged,shape=direct`` planned the direct shape."""
    with pytest.raises(InputError, match="given twice"):
        split_pairs(items)


@pytest.mark.parametrize(
    ("algorithm", "values"),
    [
        ("syccl", {"time_to_beat": float("nan")}),  # the class's check
        ("syccl", {"time_to_beat": -1.0}),
        ("mcf", {"k": 0}),
        ("mcf", {"epochs": 10**9}),  # a limit on work
        ("syccl", {"candidates": 10**6}),  # a declared range
    ],
)
def test_an_options_object_built_by_the_caller_is_judged_as_its_strings_would_be(algorithm, values):
    """The library takes an options dataclass as well as ``KEY=VALUE`` strings: both are refused, naming the
    same option, by its declared range or by the class's own check."""
    from a2acc.options import parse_options
    from a2acc.planners import options_type

    cls = options_type(algorithm)
    with pytest.raises(InputError) as as_strings:
        parse_options(cls, {k: str(v) for k, v in values.items()})
    with pytest.raises(InputError) as as_object:
        parse_options(cls, cls(**values))
    assert as_object.value.field == as_strings.value.field == next(iter(values))
    assert parse_options(cls, cls()) == cls()
