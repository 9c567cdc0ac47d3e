"""RATCHET_ROUTES: reading the setting (errors name the key) and which queue a task name gets."""

from __future__ import annotations

import pytest

from flask_ratchet.config import RatchetConfig
from flask_ratchet.errors import ConfigError, InvalidOption
from flask_ratchet.options import JobOptions
from flask_ratchet.routes import Routes, routed


def routes(value: object) -> Routes:
    found = RatchetConfig.from_mapping({"RATCHET_ROUTES": value}).routes
    assert found is not None
    return found


def test_no_routes_by_default() -> None:
    assert RatchetConfig.from_mapping({}).routes is None
    assert RatchetConfig.from_mapping({"RATCHET_ROUTES": {}}).routes is None


def test_globs_match_whole_names_case_sensitively_first_match_wins() -> None:
    table = routes({"myapp.mail:*": "mail", "myapp.*": "app", "*:export_?": "exports"})
    assert table.queue_for("myapp.mail:send_welcome") == "mail"  # before the broader glob
    assert table.queue_for("myapp.billing:charge") == "app"
    assert table.queue_for("reports:export_1") == "exports"
    assert table.queue_for("reports:export_12") is None  # ? is one character
    assert table.queue_for("MyApp.mail:send") is None  # case counts: task names are exact
    assert table.queue_for("xmyapp.mail:send") is None  # the whole name, not a part of it
    assert table.queue_for("myapp.mail:send\nother") == "mail"  # * spans any character


def test_a_callable_and_a_list_of_rules_are_tried_in_order() -> None:
    def by_suffix(task: str) -> str | None:
        return "slow" if task.endswith("_export") else None

    table = routes([{"billing.*": "billing"}, by_suffix, {"*": "rest"}])
    assert table.queue_for("billing.charge") == "billing"
    assert table.queue_for("billing.big_export") == "billing"  # the first rule decides
    assert table.queue_for("reports:month_export") == "slow"
    assert table.queue_for("reports:month") == "rest"  # None from the callable: no opinion
    assert routes(by_suffix).queue_for("a_export") == "slow"


def test_a_callable_that_gives_no_queue_name_is_refused_at_enqueue() -> None:
    def broken(task: str) -> str:
        return "no spaces allowed"

    with pytest.raises(InvalidOption, match=r"RATCHET_ROUTES: .*broken gave task 'a:b'"):
        routes(broken).queue_for("a:b")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("mail", "must be a dict of task-name globs"),
        (42, "must be a dict of task-name globs"),
        ([{"a*": "mail"}, "b"], "got 'b'"),
        ({"": "mail"}, "keys must be task-name globs"),
        ({3: "mail"}, "keys must be task-name globs"),
        ({"a*": "no spaces"}, r"RATCHET_ROUTES\['a\*'\]: queue must be"),
        ({"a*": None}, r"RATCHET_ROUTES\['a\*'\]: queue must be"),
    ],
)
def test_a_bad_setting_is_an_error_naming_the_key(value: object, words: str) -> None:
    with pytest.raises(ConfigError, match=r"RATCHET_ROUTES") as caught:
        RatchetConfig.from_mapping({"RATCHET_ROUTES": value})
    assert caught.match(words)


def test_routed_sets_only_the_queue_when_a_rule_gives_one() -> None:
    table = routes({"a:*": "elsewhere"})
    assert routed(table, "a:b", JobOptions()).queue == "elsewhere"
    assert routed(table, "b:c", JobOptions(queue="mail")).queue == "mail"  # no rule matches
    assert routed(None, "a:b", JobOptions()).queue == "default"
    kept = JobOptions(max_retries=7, tags=("x",))
    moved = routed(table, "a:b", kept)
    assert (moved.max_retries, moved.tags) == (7, ("x",))  # only the queue changes
