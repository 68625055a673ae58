"""The report's charts (Altair), each a chart of its own with its own legend, readable axes and the same colour for
a model in every chart. The page embeds each one, and the PNGs are rendered from the very same specs.

- heatmap: per model, pass rate by depth and context length in needlehaystack's red-yellow-green, rate and n in
  each cell (click one: the cell browser lists its cells); where score-10 judges scored without a threshold, the
  mean score (1-10) instead, as needlehaystack's notebook drew it;
- length: pass rate against context length, a line per model with its Wilson 95% band; ticks at the grid's lengths,
  labels thinned where they would touch;
- location: needlestacks, pass rate by the item's location, a line per repeat count (NIAN);
- negatives: negative controls, the share answered wrongly per length, split by why, with the interval and k/n;
- dissent: per judge, the share of votes against the panel's majority;
- cost: per model, the plan's estimate against the actual cost (models with a price only).
"""

from __future__ import annotations

from typing import Any

from nspec.runners.report import notation
from nspec.runners.report.data import JUDGED_WRONG, NEGATIVE_REASONS, ReportData, slug

RAMP = ["#F0496E", "#EBB839", "#0CD79F"]
# Tableau's ten: distinct in print and for the common colour-vision deficiencies.
PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#EECA3B", "#FF9DA6", "#9D755D", "#BAB0AC"]
CHARTS = ("heatmap", "length", "location", "negatives", "dissent", "cost")
WIDTH = 560


def model_colors(models: list[str]) -> Any:
    """One colour per model, the same in every chart."""
    import altair as alt

    return alt.Scale(domain=models, range=[PALETTE[i % len(PALETTE)] for i in range(len(models))])


def _legend(title: str | None = None) -> Any:
    import altair as alt

    return alt.Legend(title=title, orient="bottom", direction="vertical", labelLimit=0, symbolOpacity=1)


def _length_axis(lengths: list[int]) -> Any:
    """Ticks at the grid's lengths, written as the page writes lengths, thinned by Vega where two would touch."""
    import altair as alt

    return alt.Axis(
        values=sorted(set(lengths)), labelExpr=notation.VEGA, labelOverlap="greedy", labelSeparation=6, grid=False
    )


def heatmap(label: str, rows: list[dict[str, Any]]) -> Any:
    """Pass rate by depth and context length."""
    import altair as alt

    color = alt.Color(
        "rate:Q",
        title="Pass rate",
        scale=alt.Scale(domain=[0, 0.5, 1], range=RAMP),
        legend=alt.Legend(title="Pass rate", orient="right", format="%"),
    )
    tooltip = [
        alt.Tooltip("rate:Q", format=".0%"),
        "passes:Q",
        "n:Q",
        alt.Tooltip("ci_low:Q", format=".0%", title="95% CI low"),
        alt.Tooltip("ci_high:Q", format=".0%", title="95% CI high"),
    ]
    return _depth_grid(rows, f"{label}: pass rate by depth and context length", color, tooltip)


def score_heatmap(label: str, rows: list[dict[str, Any]]) -> Any:
    """The judges' mean score (1-10) by depth and context length, as needlehaystack drew it (its notebook let the
    colours span the data's range; here they span the scale, so that two models' maps compare)."""
    import altair as alt

    color = alt.Color(
        "score:Q",
        title="Score",
        scale=alt.Scale(domain=[1, 5.5, 10], range=RAMP),
        legend=alt.Legend(title="Score", orient="right"),
    )
    tooltip = [alt.Tooltip("score:Q", format=".2f", title="mean score"), "n:Q"]
    return _depth_grid(rows, f"{label}: mean judge score (1-10) by depth and context length", color, tooltip)


def _depth_grid(rows: list[dict[str, Any]], title: str, color: Any, tooltip: list[Any]) -> Any:
    """A heatmap of depth against context length, coloured by ``color``, its text in each cell."""
    import altair as alt

    lengths = sorted({r["context_length"] for r in rows})
    depths = sorted({r["depth"] for r in rows})
    base = alt.Chart(alt.InlineData(values=rows), title=title)
    x = alt.X(
        "context_length:O",
        title="Context length (tokens)",
        sort=lengths,
        axis=alt.Axis(labelAngle=0, labelExpr=notation.VEGA),
    )
    y = alt.Y("depth:O", title="Depth (%)", sort=depths)
    where = [alt.Tooltip("context_length:O", title="length"), alt.Tooltip("depth:O", title="depth")]
    rect = base.mark_rect(cursor="pointer").encode(x=x, y=y, color=color, tooltip=[*where, *tooltip])
    text = base.mark_text(fontSize=9).encode(x=x, y=y, text="text:N")
    step = max(28, min(64, WIDTH // max(1, len(lengths))))
    return (rect + text).properties(width=alt.Step(step), height=alt.Step(20))


def length_chart(rows: list[dict[str, Any]], models: list[str]) -> Any:
    import altair as alt

    base = alt.Chart(alt.InlineData(values=rows), title="Pass rate by context length (95% Wilson intervals)")
    x = alt.X(
        "context_length:Q",
        title="Context length (tokens)",
        scale=alt.Scale(type="log", nice=False),
        axis=_length_axis([r["context_length"] for r in rows]),
    )
    color = alt.Color("model:N", title="Model", scale=model_colors(models), legend=_legend("Model"))
    line = base.mark_line(point=alt.OverlayMarkDef(size=50, cursor="pointer")).encode(
        x=x,
        y=alt.Y("rate:Q", title="Pass rate", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        color=color,
        tooltip=["model:N", "context_length:Q", alt.Tooltip("rate:Q", format=".0%"), "passes:Q", "n:Q"],
    )
    band = base.mark_area(opacity=0.15).encode(x=x, y="ci_low:Q", y2="ci_high:Q", color=color)  # one legend for both
    return (band + line).properties(width=WIDTH, height=280)


def location_chart(rows: list[dict[str, Any]], models: list[str]) -> Any:
    import altair as alt

    return (
        alt.Chart(alt.InlineData(values=rows), title="Pass rate by location of the item, per repeat count")
        .mark_line(point=True)
        .encode(
            x=alt.X("location:Q", title="Location (% of the stack)"),
            y=alt.Y("rate:Q", title="Pass rate", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
            color=alt.Color("model:N", title="Model", scale=model_colors(models), legend=_legend("Model")),
            strokeDash=alt.StrokeDash("repeat:N", title="Repeats", legend=_legend("Repeats")),
            tooltip=["model:N", "location:Q", "repeat:N", alt.Tooltip("rate:Q", format=".0%"), "n:Q"],
        )
        .properties(width=WIDTH, height=280)
    )


def negatives_chart(label: str, rows: list[dict[str, Any]], reasons: list[dict[str, Any]]) -> Any:
    """One model's negative controls: the share answered wrongly at each length, split by why, with the Wilson
    interval and k/n over each length (every length has its place, wrong answers or not)."""
    import altair as alt

    lengths = sorted(r["context_length"] for r in rows)
    why = [*NEGATIVE_REASONS.values(), JUDGED_WRONG]
    x = alt.X(
        "context_length:O",
        title="Context length (tokens)",
        sort=lengths,
        scale=alt.Scale(domain=lengths),
        axis=alt.Axis(labelAngle=0, labelExpr=notation.VEGA),
    )
    bars = (
        alt.Chart(
            alt.InlineData(values=reasons or [{"context_length": lengths[0], "rate": 0, "reason": why[0], "count": 0}])
        )
        .mark_bar()
        .encode(
            x=x,
            y=alt.Y(
                "rate:Q",
                title="Share answered wrongly",
                scale=alt.Scale(domain=[0, 1]),
                stack="zero",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "reason:N",
                title="Why",
                scale=alt.Scale(domain=why, range=[RAMP[0], "#8c6bb1", "#777"]),
                legend=_legend("Why"),
            ),
            tooltip=["context_length:O", "reason:N", "count:Q"],
        )
    )
    totals = alt.Chart(alt.InlineData(values=rows))
    errors = totals.mark_rule().encode(x=x, y="ci_low:Q", y2="ci_high:Q")
    counts = (
        totals.transform_calculate(label="datum.passes + '/' + datum.n")
        .mark_text(dy=-6, fontSize=9)
        .encode(x=x, y="ci_high:Q", text="label:N")
    )  # above the interval; "0/16" reads where no bar shows
    step = max(36, min(64, WIDTH // max(1, len(lengths))))
    return alt.layer(bars, errors, counts).properties(
        width=alt.Step(step), height=200, title=f"{label}: negative controls answered wrongly (no needle), and why"
    )


def dissent_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    values = [r for r in rows if r["dissent_from_majority"] is not None]
    return (
        alt.Chart(alt.InlineData(values=values), title="Judge dissent: votes against the panel's majority")
        .mark_bar()
        .encode(
            x=alt.X(
                "dissent_from_majority:Q",
                title="Share of votes",
                scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"),
            ),
            y=alt.Y("judge:N", title=None, axis=alt.Axis(labelLimit=0)),
            tooltip=["judge:N", "votes:Q", alt.Tooltip("dissent_from_majority:Q", format=".1%")],
        )
        .properties(width=WIDTH - 160)
    )


def cost_chart(rows: list[dict[str, Any]]) -> Any:
    import altair as alt

    kinds = ["estimate, live", "estimate, batch", "actual"]
    return (
        alt.Chart(alt.InlineData(values=rows), title="Cost per model (USD): the plan's estimate against actual")
        .mark_bar()
        .encode(
            x=alt.X("usd:Q", title="USD", axis=alt.Axis(format="$.2~g", labelOverlap="greedy")),
            y=alt.Y("model:N", title=None, axis=alt.Axis(labelLimit=0)),
            yOffset=alt.YOffset("kind:N", sort=kinds),
            color=alt.Color(
                "kind:N",
                title=None,
                sort=kinds,
                scale=alt.Scale(domain=kinds, range=["#BAB0AC", "#72B7B2", "#4C78A8"]),
                legend=_legend(""),
            ),
            tooltip=[
                "model:N",
                "kind:N",
                alt.Tooltip("usd:Q", format="$.4f"),
                alt.Tooltip("input_tokens:Q", format=","),
            ],
        )
        .properties(width=WIDTH - 160)
    )


def charts(data: ReportData, wanted: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    """(file name, model it belongs to or "", chart) for every wanted chart that has data."""
    out: list[tuple[str, str, Any]] = []
    models = data.models
    if "heatmap" in wanted:
        for label, rows in data.heat.items():
            out.append((f"heatmap-{slug(label)}", label, heatmap(label, rows)))
        for label, rows in data.score_heat.items():
            if label not in data.heat:
                out.append((f"heatmap-{slug(label)}", label, score_heatmap(label, rows)))
    if "length" in wanted and data.lengths:
        out.append(("length", "", length_chart(data.lengths, models)))
    if "location" in wanted and data.locations:
        out.append(("location", "", location_chart(data.locations, models)))
    if "negatives" in wanted:
        for label in models:
            rows = [r for r in data.negatives if r["model"] == label]
            if rows:
                reasons = [r for r in data.negative_reasons if r["model"] == label]
                out.append((f"negatives-{slug(label)}", label, negatives_chart(label, rows, reasons)))
    judged = [r for r in data.dissent if r["votes"] and r["dissent_from_majority"] is not None]
    if "dissent" in wanted and judged:
        out.append(("dissent", "", dissent_chart(judged)))
    priced = [r for r in data.costs if r["usd"] > 0]
    if "cost" in wanted and priced:  # a run that cost nothing (local models) has nothing to chart
        out.append(("cost", "", cost_chart([r for r in data.costs if r["model"] in {p["model"] for p in priced}])))
    return out
