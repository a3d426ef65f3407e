"""The Grafana dashboard shipped in the package asks only for metrics the exporter
(``readergroup metrics serve``) really serves: scraped from a running exporter."""

from __future__ import annotations

import json
import re
import urllib.request
from importlib import resources

from prometheus_client.parser import text_string_to_metric_families

from readergroup import ReaderGroupManager, StreamManager
from readergroup.core.group_config import ReaderGroupConfig
from tests.test_cli_metrics import endpoint  # noqa: F401 (the fixture: a real exporter)

DASHBOARD = resources.files("readergroup.console") / "grafana" / "readergroup.json"
METRIC = re.compile(r"\breadergroup_[a-z_]+\b")


def served_names(text: str) -> set[str]:
    """Every series name an exposition offers (a counter's family ``x`` serves ``x_total``)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
        names |= {sample.name for sample in family.samples}
    return names


def test_every_panel_queries_only_served_metrics(
    endpoint: str,  # noqa: F811
    redis_url: str,
    scope: str,
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "orders")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("billing", ReaderGroupConfig(streams=[f"{scope}/orders"]))
    with urllib.request.urlopen(endpoint, timeout=30) as response:
        served = served_names(response.read().decode())
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    queries += [
        (v["name"], v["definition"]) for v in dashboard["templating"]["list"] if "definition" in v
    ]
    assert len(dashboard["panels"]) >= 10
    for title, expr in queries:
        named = set(METRIC.findall(expr))
        assert named, f"{title}: no readergroup metric in {expr!r}"
        assert named <= served, f"{title}: {sorted(named - served)} not served by the exporter"
    wanted = {
        "readergroup_group_lag_events",
        "readergroup_segment_lag_events",
        "readergroup_segment_lag_seconds",
        "readergroup_segment_tail",
        "readergroup_group_rebalances_total",
        "readergroup_group_readers_fenced",
        "readergroup_group_last_checkpoint_timestamp_seconds",
    }
    assert wanted <= {name for _, expr in queries for name in METRIC.findall(expr)}
