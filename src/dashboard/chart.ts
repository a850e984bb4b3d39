/** Charts drawn with uPlot (bundled from the npm package). */
import uPlot from "uplot";
import { h } from "./dom";

/** One series: label, colour and values (null = no point). */
export type Series = {
  label: string;
  color: string;
  values: (number | null)[];
  bars?: boolean;
  fill?: boolean;
  dash?: number[];
  /** What the legend shows for each point under the cursor (exact amounts), instead of the plotted value. */
  display?: string[];
  /** Only in the legend (hover), not drawn. */
  legendOnly?: boolean;
  /** "right": plotted against a second axis on the right. */
  axis?: "right";
};

const fmtAxisDate = (interval: string) => (_u: uPlot, splits: number[]) =>
  splits.map((s) => {
    const d = new Date(s * 1000);
    return interval === "month"
      ? d.toLocaleDateString("en-US", { month: "short", year: "2-digit", timeZone: "UTC" })
      : d.toLocaleDateString("en-US", { month: "short", day: "numeric", timeZone: "UTC" });
  });

/**
 * A time chart over `x` (unix seconds). The container carries the plotted data in `data-chart` (JSON) so tests and
 * tools can read exactly what is drawn; the chart follows the container's width.
 */
export function timeChart(opts: {
  x: number[];
  series: Series[];
  interval: string;
  height?: number;
  data?: unknown;
  valueFormat?: (v: number) => string;
  /** The legend follows the cursor and shows each series' value there (`display` when given). */
  hover?: boolean;
  /** Labels of the right axis (when a series has `axis: "right"`). */
  rightFormat?: (v: number) => string;
}): HTMLElement {
  const box = h("div", { class: "chart", dataset: { chart: JSON.stringify(opts.data ?? null) } });
  const bars = uPlot.paths.bars!({ size: [0.6, 40] });
  const none = () => null;
  const gaps = opts.x.slice(1).map((v, i) => v - opts.x[i]!);
  const pad = gaps.length ? Math.min(...gaps) / 2 : 43_200;
  const right = opts.series.some((s) => s.axis === "right");
  const date = (s: number) =>
    new Date(s * 1000).toLocaleDateString("en-US", {
      month: "short",
      day: "numeric",
      year: "numeric",
      timeZone: "UTC",
    });
  const make = (width: number) =>
    new uPlot(
      {
        width,
        height: opts.height ?? 220,
        legend: { show: true, live: opts.hover ?? false },
        cursor: { drag: { x: false, y: false } },
        // Away from the chart, the hover legend shows the latest period.
        hooks: opts.hover ? { setCursor: [(u: uPlot) => u.cursor.idx == null && showLatest(u)] } : undefined,
        scales: {
          // Half a period of room on each side, so the first and last bars are whole.
          x: { time: true, range: (_u, min, max) => [min - pad, max + pad] },
        },
        axes: [
          { values: fmtAxisDate(opts.interval), stroke: "#697386", grid: { show: false }, ticks: { show: false } },
          {
            stroke: "#697386",
            grid: { stroke: "#eef0f3" },
            ticks: { show: false },
            size: 64,
            values: (_u, splits) => splits.map((v) => (opts.valueFormat ? opts.valueFormat(v) : compact(v))),
          },
          ...(right
            ? [
                {
                  scale: "right",
                  side: 1,
                  stroke: "#697386",
                  grid: { show: false },
                  ticks: { show: false },
                  size: 64,
                  values: (_u: uPlot, splits: number[]) => splits.map((v) => (opts.rightFormat ?? compact)(v)),
                },
              ]
            : []),
        ],
        series: [
          { label: "Period", value: (_u, v) => (v === null ? "—" : date(v)) },
          ...opts.series.map((s) => ({
            label: s.label,
            stroke: s.color,
            width: s.bars || s.legendOnly ? 0 : 2,
            fill: s.bars ? s.color : s.fill ? `${s.color}1f` : undefined,
            fillTo: s.bars ? 0 : undefined,
            paths: s.legendOnly ? none : s.bars ? bars : undefined,
            dash: s.dash,
            scale: s.axis === "right" ? "right" : "y",
            points: { show: false },
            value: s.display
              ? (_u: uPlot, _v: number | null, _i: number, idx: number | null) =>
                  idx === null ? "—" : (s.display![idx] ?? "—")
              : undefined,
          })),
        ],
      },
      [opts.x, ...opts.series.map((s) => s.values)] as uPlot.AlignedData,
      box,
    );
  const showLatest = (u: uPlot) => opts.x.length > 0 && u.setLegend({ idx: opts.x.length - 1 }, false);
  let plot: uPlot | null = null;
  const observer = new ResizeObserver(() => {
    const width = Math.max(240, Math.floor(box.clientWidth));
    if (!plot) {
      plot = make(width);
      if (opts.hover) showLatest(plot);
    } else if (Math.abs(plot.width - width) > 2) plot.setSize({ width, height: opts.height ?? 220 });
  });
  observer.observe(box);
  return box;
}

/** 1234567 → "1.2M". */
export function compact(v: number): string {
  return new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 }).format(v);
}
