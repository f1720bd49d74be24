"""The group page's lag chart drawn from lag samples: the total and the most lagging partitions, names escaped."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from storage_maintenance.ui.lag_chart import MAX_LINES, lag_chart

pytestmark = pytest.mark.unit

SVG = "{http://www.w3.org/2000/svg}"


def test_no_sample_no_chart():
    assert lag_chart([])["svg"] is None


def test_the_total_and_the_most_lagging_partitions_are_drawn():
    samples: list[dict[str, Any]] = []
    for i in range(4):
        partitions = {(f"t<&>{p}", 0): p * i for p in range(MAX_LINES + 3)}
        samples.append({"t": 1000 * i, "lag": sum(partitions.values()), "partitions": partitions})
    chart = lag_chart(samples)
    svg = ET.fromstring(chart["svg"])                    # well-formed: the topic names are escaped
    lines = svg.findall(f"{SVG}polyline")
    total = [x for x in lines if x.get("class") == "total"]
    parts = [x.get("data-partition", "") for x in lines if x.get("class") == "partition"]
    points = total[0].get("points", "").split()
    assert len(total) == 1 and len(points) == 4
    assert sorted(parts) == sorted(f"t<&>{p}-0" for p in range(3, MAX_LINES + 3))     # the most lagging ones
    assert chart["max_lag"] == samples[-1]["lag"] and chart["points"] == 4
    assert [line["name"] for line in chart["lines"]] == parts
    ys = [float(pt.split(",")[1]) for pt in points]
    assert ys == sorted(ys, reverse=True)                # a growing lag climbs (SVG's y grows downwards)


def test_one_sample_is_a_point():
    chart = lag_chart([{"t": 5, "lag": 7, "partitions": {("a", 0): 7}}])
    svg = ET.fromstring(chart["svg"])
    assert len(svg.findall(f"{SVG}circle")) == 1 and chart["lines"] == []    # one partition: the total says it
