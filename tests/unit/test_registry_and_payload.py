from __future__ import annotations

import functools
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from flask_ratchet import payload
from flask_ratchet.errors import PayloadError, PayloadTooLarge, TaskNotAllowed, UnknownTask
from flask_ratchet.options import JobOptions, Priority
from flask_ratchet.registry import TaskRegistry, default_name, module_allowed


def plain(x: int) -> int:
    return x


def other(x: int) -> int:
    return x


def make_closure() -> Any:
    y = 1

    def inner(x: int) -> int:
        return x + y

    return inner


class Service:
    def method(self) -> None: ...


def test_default_name_is_module_and_qualname() -> None:
    assert default_name(plain) == f"{__name__}:plain"


def test_registered_task_is_found_by_function_and_name() -> None:
    registry = TaskRegistry()
    task = registry.register(plain, None, JobOptions(priority=Priority.HIGH))
    assert registry.for_submit(plain, ()) is task
    assert registry.for_submit(task.name, ()) is task
    assert registry.for_run(task.name, ()) is task


def test_a_name_cannot_be_taken_twice() -> None:
    registry = TaskRegistry()
    registry.register(plain, "same", JobOptions())
    with pytest.raises(ValueError, match="already used"):
        registry.register(other, "same", JobOptions())


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (lambda x: x, "lambdas cannot be enqueued"),
        (make_closure(), "nested function or closure"),
        (Service().method, "not a plain function"),
        (len, "not a plain function"),
    ],
)
def test_unimportable_callables_are_refused(target: Any, message: str) -> None:
    with pytest.raises(TaskNotAllowed, match=message):
        TaskRegistry().for_submit(target, (__name__,))


def test_unregistered_function_needs_the_allow_list() -> None:
    registry = TaskRegistry()
    with pytest.raises(TaskNotAllowed, match="RATCHET_ALLOWED_MODULES"):
        registry.for_submit(plain, ())
    assert registry.for_submit(plain, ("tests",)).name == default_name(plain)
    assert registry.for_run(default_name(plain), ("tests.unit",)).func is plain


def test_run_time_lookup_rechecks_the_allow_list() -> None:
    registry = TaskRegistry()
    # Unknown here (another app's task, or newer code's): a worker hands such a job back.
    with pytest.raises(UnknownTask, match="not registered in this worker"):
        registry.for_run(default_name(plain), ())
    with pytest.raises(UnknownTask, match="has no 'missing' here"):
        registry.for_run(f"{__name__}:missing", ("tests",))
    with pytest.raises(UnknownTask, match="not registered in this worker"):
        registry.for_run("os:system", ("tests",))
    # Known, and not allowed: a worker fails such a job for good.
    with pytest.raises(TaskNotAllowed, match="names no function") as refused:
        registry.for_run(f"{__name__}:alias", ("tests",))
    assert not isinstance(refused.value, UnknownTask)


alias = plain


@pytest.mark.parametrize(
    "name",
    [
        "json.dumps",  # through a module this one imported
        "Service.method",  # through a class
        "default_name",  # a function this module imported, defined elsewhere
        "alias",  # bound here under another name
        "Service",  # a class, not a function
        "plain.__globals__",
    ],
)
def test_only_functions_defined_in_an_allowed_module_run(name: str) -> None:
    with pytest.raises(TaskNotAllowed, match="defined at the top level"):
        TaskRegistry().for_run(f"{__name__}:{name}", (__name__,))


def test_an_allowed_module_that_fails_to_import_runs_nothing() -> None:
    with pytest.raises(UnknownTask, match="cannot be imported here"):
        TaskRegistry().for_run("tests.unit.no_such_module:f", ("tests",))


def test_only_top_level_functions_are_enqueued_from_the_allow_list() -> None:
    with pytest.raises(TaskNotAllowed, match="top level of its module"):
        TaskRegistry().for_submit(Service.method, (__name__,))


def test_module_prefix_matching_is_by_dotted_segment() -> None:
    assert module_allowed("myapp", ("myapp",))
    assert module_allowed("myapp.tasks.mail", ("myapp.tasks",))
    assert not module_allowed("myappx", ("myapp",))


def test_arguments_encode_once_as_compact_json() -> None:
    text = payload.encode_arguments("t", (1, "é", [True, None]), {"k": {"n": 1.5}}, 1000)
    assert json.loads(text) == {"args": [1, "é", [True, None]], "kwargs": {"k": {"n": 1.5}}}
    assert " " not in text


@pytest.mark.parametrize(
    ("args", "kwargs", "where"),
    [
        ((datetime.now(UTC),), {}, "argument 1"),
        ((1, {1, 2}), {}, "argument 2"),
        ((), {"when": object()}, "keyword argument 'when'"),
        ((float("nan"),), {}, "argument 1"),
    ],
)
def test_non_json_arguments_are_refused_naming_the_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], where: str
) -> None:
    with pytest.raises(PayloadError, match=where) as info:
        payload.encode_arguments("mod:task", args, kwargs, 1000)
    assert "JSON" in str(info.value)


def test_oversized_payload_is_refused_with_the_limit() -> None:
    with pytest.raises(PayloadTooLarge, match=r"RATCHET_MAX_PAYLOAD_BYTES \(100\)"):
        payload.encode_arguments("t", ("x" * 200,), {}, 100)
    with pytest.raises(PayloadTooLarge):
        payload.encode_value("the result", "é" * 60, 100)  # counted in UTF-8 bytes


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_nesting_is_allowed_up_to_the_limit_in_each_argument_and_value() -> None:
    deepest = _nested(payload.MAX_DEPTH)
    text = payload.encode_arguments("t", (deepest,), {"k": deepest}, 10**6)
    assert json.loads(text) == {"args": [deepest], "kwargs": {"k": deepest}}
    assert json.loads(payload.encode_value("the result", deepest, 10**6)) == deepest


@pytest.mark.parametrize("depth", [payload.MAX_DEPTH + 1, 100_000])
def test_deeper_nesting_is_a_payload_error_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(PayloadError, match=f"argument 2 .* more than {payload.MAX_DEPTH} levels"):
        payload.encode_arguments("t", (1, _nested(depth)), {}, 10**7)
    with pytest.raises(PayloadError, match="the result is nested"):
        payload.encode_value("the result", _nested(depth), 10**7)


@pytest.mark.parametrize(
    ("args", "kwargs", "where"),
    [
        (("\ud800",), {}, "argument 1"),
        ((1, {"ok": [{"\udfff": 1}]}), {}, "argument 2"),
        ((), {"\ud800": 1}, "keyword argument"),
    ],
)
def test_lone_surrogates_are_refused_naming_the_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], where: str
) -> None:
    with pytest.raises(PayloadError, match=f"{where}.*not valid Unicode") as info:
        payload.encode_arguments("t", args, kwargs, 1000)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


def test_nul_inside_json_is_stored_as_its_plain_text_escape() -> None:
    text = payload.encode_arguments("t", ("a\x00b",), {"k\x00": 1}, 1000)
    assert "\x00" not in text
    assert json.loads(text) == {"args": ["a\x00b"], "kwargs": {"k\x00": 1}}


# -- registering is an explicit allow: any callable, named if it has no top-level name -----------


class Doubler:
    def __call__(self, x: int) -> int:
        return 2 * x


@pytest.mark.parametrize(
    "target",
    [make_closure(), lambda x: x, Service().method, Doubler(), functools.partial(plain, 1)],
)
def test_any_callable_registers_under_a_name_and_runs_by_it(target: Any) -> None:
    registry = TaskRegistry()
    task = registry.register(target, "given.name", JobOptions())
    assert registry.for_run("given.name", ()) is task and task.func is target
    assert registry.for_submit(target, ()) is task  # registered: no allow-list needed


@pytest.mark.parametrize(
    ("target", "said"),
    [
        (make_closure(), "make_closure.<locals>.inner has no top-level name"),
        (lambda x: x, "<lambda> has no top-level name"),
        (Service().method, "Service.method has no top-level name"),
        (Doubler(), "has no top-level name"),
    ],
)
def test_a_callable_without_a_top_level_name_needs_a_name(target: Any, said: str) -> None:
    registry = TaskRegistry()
    with pytest.raises(TaskNotAllowed, match=re.escape(said)) as refused:
        registry.register(target, None, JobOptions())
    assert "@ratchet.task(name=" in str(refused.value)
    assert list(registry) == []


def test_a_function_wrapped_with_functools_wraps_keeps_its_top_level_name() -> None:
    @functools.wraps(plain)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return plain(*args, **kwargs)

    task = TaskRegistry().register(wrapper, None, JobOptions())
    assert task.name == default_name(plain) and task.func is wrapper


def test_what_cannot_be_registered_is_refused_saying_why() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self) -> None: ...

    with pytest.raises(TaskNotAllowed, match="not callable"):
        TaskRegistry().register(42, "n", JobOptions())  # type: ignore[arg-type]
    with pytest.raises(TaskNotAllowed, match="not hashable"):
        TaskRegistry().register(Unhashable(), "n", JobOptions())


def test_two_callables_under_one_name_are_refused_but_the_same_one_again_is_not() -> None:
    registry = TaskRegistry()
    closure = make_closure()
    registry.register(closure, "shared", JobOptions())
    registry.register(closure, "shared", JobOptions())  # the same origin: a re-import
    with pytest.raises(ValueError, match="already used"):
        registry.register(Doubler(), "shared", JobOptions())


def test_unregistered_callables_keep_the_allow_list_rules() -> None:
    registry = TaskRegistry()
    registry.register(make_closure(), "a.closure", JobOptions())
    with pytest.raises(TaskNotAllowed, match="nested function or closure"):
        registry.for_submit(make_closure(), (__name__,))  # another closure, not registered
