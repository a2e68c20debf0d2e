/** Draws the fleet timelines as one SVG: issuances, revoked tokens received and caller p99, per second. */
import type { FleetResult } from './fleet.js';

const WIDTH = 900;
const PANEL = 170;
const MARGIN = { left: 70, right: 20, top: 40, gap: 70 };
const COLORS: Record<FleetResult['mode'], string> = { broker: '#1f77b4', baseline: '#d62728' };

const escapeXml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;');

const niceMax = (value: number) => {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * magnitude).find((m) => m >= value) ?? value;
};

const panel = (
  results: readonly FleetResult[],
  top: number,
  title: string,
  value: (point: FleetResult['timeline'][number]) => number,
  unit: string,
) => {
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const tMax = Math.max(...results.flatMap((r) => r.timeline.map((p) => p.t))) || 1;
  const yMax = niceMax(Math.max(...results.flatMap((r) => r.timeline.map(value))));
  const x = (t: number) => MARGIN.left + (t / tMax) * plotWidth;
  const y = (v: number) => top + PANEL - (v / yMax) * PANEL;
  const parts = [
    `<text x="${MARGIN.left}" y="${top - 12}" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    `<line x1="${MARGIN.left}" y1="${top + PANEL}" x2="${WIDTH - MARGIN.right}" y2="${top + PANEL}" stroke="#333"/>`,
    `<line x1="${MARGIN.left}" y1="${top}" x2="${MARGIN.left}" y2="${top + PANEL}" stroke="#333"/>`,
  ];
  for (let i = 0; i <= 4; i += 1) {
    const v = (yMax * i) / 4;
    parts.push(
      `<line x1="${MARGIN.left}" y1="${y(v)}" x2="${WIDTH - MARGIN.right}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${MARGIN.left - 8}" y="${y(v) + 4}" font-size="11" text-anchor="end">${Number(v.toFixed(1))}${unit}</text>`,
    );
  }
  for (let t = 0; t <= tMax; t += Math.max(1, Math.round(tMax / 10))) {
    parts.push(
      `<text x="${x(t)}" y="${top + PANEL + 16}" font-size="11" text-anchor="middle">${t}s</text>`,
    );
  }
  for (const result of results) {
    const points = result.timeline
      .map((p) => `${x(p.t).toFixed(1)},${y(value(p)).toFixed(1)}`)
      .join(' ');
    parts.push(
      `<polyline fill="none" stroke="${COLORS[result.mode]}" stroke-width="2" points="${points}"/>`,
    );
  }
  return parts.join('\n');
};

export const fleetChart = (results: readonly FleetResult[], caption: string): string => {
  const panels = 3;
  const height = MARGIN.top + panels * PANEL + (panels - 1) * MARGIN.gap + 80;
  const legend = results
    .map(
      (r, i) =>
        `<rect x="${MARGIN.left + i * 200}" y="${height - 24}" width="14" height="14" fill="${COLORS[r.mode]}"/>` +
        `<text x="${MARGIN.left + 20 + i * 200}" y="${height - 12}" font-size="12">${r.mode === 'baseline' ? 'baseline (each container for itself)' : 'broker'}</text>`,
    )
    .join('\n');
  const top = (i: number) => MARGIN.top + i * (PANEL + MARGIN.gap);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    panel(results, top(0), 'Upstream issuances per second', (p) => p.issuances, ''),
    panel(
      results,
      top(1),
      'Callers that received an already-revoked token, per second',
      (p) => p.revoked,
      '',
    ),
    panel(results, top(2), 'Caller latency p99 per second (ms)', (p) => p.p99, ''),
    `<text x="${MARGIN.left}" y="${height - 44}" font-size="9.5" fill="#555">${escapeXml(caption)}</text>`,
    legend,
    '</svg>',
  ].join('\n');
};
