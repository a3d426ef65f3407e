/* readergroup console: SVG charts drawn from the console's JSON (no library, no CDN).
 * Charts.segmentGraph(stream), Charts.lagChart(history, seconds), Charts.timeline(group). */
"use strict";

const Charts = (() => {
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
    "#ca8a04", "#db2777", "#4b5563", "#65a30d"];

  function esc(value) {
    return String(value).replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
    })[c]);
  }

  function clock(ms) {
    return new Date(ms).toISOString().substring(11, 19);
  }

  function color(i) { return PALETTE[i % PALETTE.length]; }

  function fmt(n) {
    if (n === null || n === undefined) return "";
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(0) + "k";
    return String(Math.round(n * 10) / 10);
  }

  /* The stream's segments over its epochs: key range down, epochs (with their times) across;
   * splits and merges as edges; sealed and truncated segments marked; the retention cut and
   * each group's committed positions drawn on the segments they are in. */
  function segmentGraph(s) {
    const W = 1200, H = 460, left = 56, right = 16, top = 14, bottom = 40;
    const epochs = s.epochs.map((e) => e.epoch);
    const index = new Map(epochs.map((e, i) => [e, i]));
    const cols = epochs.length;
    const colW = (W - left - right) / cols;
    const x = (epoch) => left + (index.has(epoch) ? index.get(epoch) : cols) * colW;
    const y = (key) => top + key * (H - top - bottom);
    const table = new Map(s.table.map((row) => [row.id, row]));
    const out = [];
    out.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="100%"` +
      ` class="segment-graph" data-segments="${s.segments.length}" data-epochs="${cols}">`);
    for (let k = 0; k <= 4; k++) {
      const yy = y(k / 4);
      out.push(`<line class="grid" x1="${left}" x2="${W - right}" y1="${yy}" y2="${yy}"/>`);
      out.push(`<text x="${left - 6}" y="${yy + 4}" text-anchor="end">${(k / 4).toFixed(2)}</text>`);
    }
    const step = Math.max(1, Math.ceil(cols / 12));
    s.epochs.forEach((e, i) => {
      if (i % step) return;
      const xx = left + i * colW;
      out.push(`<line class="grid" x1="${xx}" x2="${xx}" y1="${top}" y2="${H - bottom}"/>`);
      out.push(`<text x="${xx + 2}" y="${H - bottom + 14}">e${e.epoch}</text>`);
      out.push(`<text x="${xx + 2}" y="${H - bottom + 28}" class="muted">${clock(e.created_ms)}</text>`);
    });
    const byId = new Map();
    for (const seg of s.segments) {
      const end = seg.sealed_epoch >= 0 ? seg.sealed_epoch : null;
      const x0 = x(seg.epoch), x1 = end === null ? W - right : x(end);
      const y0 = y(seg.low), y1 = y(seg.high);
      byId.set(seg.id, { x0, x1, y0, y1 });
      const kind = seg.truncated ? "truncated" : end !== null ? "sealed" : "open";
      const row = table.get(seg.id);
      const detail = row ? ` head ${row.head} tail ${row.tail} bytes ${row.bytes}` : "";
      out.push(`<rect class="seg ${kind}" data-id="${seg.id}" x="${x0}" y="${y0}"` +
        ` width="${Math.max(1, x1 - x0)}" height="${Math.max(0.5, y1 - y0)}"><title>segment ` +
        `${seg.id} (epoch ${seg.epoch}) [${seg.low.toFixed(4)}, ${seg.high.toFixed(4)}) ${kind}` +
        `${detail}</title></rect>`);
    }
    let edges = 0;
    for (const seg of s.segments) {
      const a = byId.get(seg.id);
      for (const succ of seg.successors) {
        const b = byId.get(succ);
        if (!b) continue;
        const ya = (a.y0 + a.y1) / 2, yb = (b.y0 + b.y1) / 2;
        const xa = Math.max(a.x0, a.x1 - colW / 4), xb = Math.min(b.x1, b.x0 + colW / 4);
        out.push(`<path class="edge" d="M${xa},${ya} C${b.x0},${ya} ${a.x1},${yb} ${xb},${yb}"/>`);
        edges++;
      }
    }
    for (const [id, offset] of Object.entries(s.head)) {
      const box = byId.get(Number(id));
      if (!box || offset <= 0) continue;
      out.push(`<line class="cut" x1="${box.x0 + 1}" x2="${box.x0 + 1}" y1="${box.y0}"` +
        ` y2="${box.y1}"><title>retention cut: segment ${id} from offset ${offset}</title></line>`);
    }
    let hidden = 0;
    s.groups.forEach((g, i) => {
      for (const [id, position] of Object.entries(g.positions)) {
        const box = byId.get(Number(id));
        if (!box) continue;
        if (box.y1 - box.y0 < 3) { hidden++; continue; }  /* too thin to tell dots apart */
        const row = table.get(Number(id));
        const span = row && row.tail > row.head ? (position - row.head) / (row.tail - row.head) : 1;
        const xx = box.x0 + Math.min(1, Math.max(0, span)) * (box.x1 - box.x0 - 6) + 3;
        const yy = box.y0 + (box.y1 - box.y0) * ((i + 1) / (s.groups.length + 1));
        out.push(`<circle class="position" cx="${xx}" cy="${yy}" r="3.5" fill="${color(i)}">` +
          `<title>${esc(g.group)}: segment ${id} at ${position}</title></circle>`);
      }
    });
    out.push(`<line class="axis" x1="${left}" x2="${left}" y1="${top}" y2="${H - bottom}"/>`);
    out.push(`<text x="4" y="${(top + H - bottom) / 2}">key</text>`);
    out.push(`</svg>`);
    const legend = ['<div class="legend"><span><i style="background:#93c5fd"></i>open</span>',
      '<span><i style="background:#d1d5db"></i>sealed</span>',
      '<span><i style="background:#f3f4f6;border:1px dashed #9ca3af"></i>truncated</span>',
      '<span><i style="background:#b91c1c"></i>retention cut</span>',
      `<span>${edges} split/merge edges</span>`];
    if (hidden) legend.push(`<span class="muted">${hidden} positions on segments too thin to mark (see the groups' pages)</span>`);
    s.groups.forEach((g, i) => legend.push(
      `<span><i style="background:${color(i)};border-radius:50%"></i>${esc(g.group)}</span>`));
    legend.push("</div>");
    return out.join("") + legend.join("");
  }

  /* Lag over the console's sampling window: the total, and the segments that lagged most. */
  function lagChart(history, seconds) {
    const W = 1200, H = 260, left = 60, right = 16, top = 10, bottom = 28;
    const times = history.times;
    const now = times.length ? times[times.length - 1] : Date.now();
    const t0 = now - seconds * 1000;
    const series = [["total", history.total]].concat(Object.entries(history.segments));
    let max = 1;
    for (const [, values] of series) for (const v of values) if (v > max) max = v;
    const x = (t) => left + ((t - t0) / (now - t0 || 1)) * (W - left - right);
    const y = (v) => H - bottom - (v / max) * (H - top - bottom);
    const out = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="100%"` +
      ` class="lag-chart" data-samples="${times.length}" data-last-total="` +
      `${times.length ? history.total[times.length - 1] : ""}">`];
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4;
      out.push(`<line class="grid" x1="${left}" x2="${W - right}" y1="${y(v)}" y2="${y(v)}"/>`);
      out.push(`<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${fmt(v)}</text>`);
    }
    for (let m = 0; m <= seconds / 60; m += Math.max(1, Math.round(seconds / 60 / 5))) {
      const t = now - m * 60000;
      out.push(`<text x="${x(t)}" y="${H - 8}" text-anchor="middle">-${m}m</text>`);
    }
    series.forEach(([name, values], i) => {
      const points = [];
      values.forEach((v, j) => {
        if (v !== null && v !== undefined && times[j] >= t0) points.push(`${x(times[j]).toFixed(1)},${y(v).toFixed(1)}`);
      });
      if (!points.length) return;
      const cls = name === "total" ? "line total" : "line";
      const stroke = name === "total" ? "" : ` stroke="${color(i - 1)}"`;
      if (points.length === 1) {  /* one sample so far: a dot, a line needs two */
        const [cx, cy] = points[0].split(",");
        out.push(`<circle cx="${cx}" cy="${cy}" r="3" fill="${name === "total" ? "#111827" : color(i - 1)}"/>`);
      }
      out.push(`<polyline class="${cls}"${stroke} points="${points.join(" ")}"><title>${esc(name)}</title></polyline>`);
    });
    out.push(`<line class="axis" x1="${left}" x2="${left}" y1="${top}" y2="${H - bottom}"/></svg>`);
    const legend = ['<div class="legend"><span><i style="background:#111827"></i>total</span>'];
    Object.keys(history.segments).forEach((name, i) =>
      legend.push(`<span><i style="background:${color(i)}"></i>${esc(name)}</span>`));
    legend.push("</div>");
    return out.join("") + legend.join("");
  }

  /* Membership over the history window: one lane per reader, a bar while it was a member,
   * joins and removals marked. */
  function timeline(group) {
    const entries = group.history.entries;
    const now = group.server_ms;
    const lanes = new Map();
    const lane = (reader) => {
      if (!lanes.has(reader)) lanes.set(reader, { spans: [], open: null, marks: [] });
      return lanes.get(reader);
    };
    const start = entries.length ? entries[0].server_ms : now - 60000;
    for (const m of group.members) {
      if (m.joined_ms < start) lane(m.reader).open = start;
    }
    for (const e of entries) {
      for (const ev of e.membership) {
        const l = lane(ev.reader);
        l.marks.push({ t: e.server_ms, kind: ev.kind, by: e.by });
        if (ev.kind === "joined") l.open = e.server_ms;
        else { l.spans.push([l.open === null ? start : l.open, e.server_ms]); l.open = null; }
      }
    }
    const online = new Set(group.members.map((m) => m.reader));
    for (const [reader, l] of lanes) {
      if (l.open !== null && online.has(reader)) l.spans.push([l.open, now]);
    }
    const rows = [...lanes.keys()];
    const W = 1200, left = 220, right = 16, rowH = 14, top = 6;
    const H = top + rows.length * rowH + 24;
    const x = (t) => left + ((t - start) / (now - start || 1)) * (W - left - right);
    const out = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="100%"` +
      ` class="timeline" data-lanes="${rows.length}">`];
    rows.forEach((reader, i) => {
      const l = lanes.get(reader);
      const yy = top + i * rowH;
      out.push(`<text x="${left - 6}" y="${yy + 10}" text-anchor="end">${esc(reader.substring(0, 34))}</text>`);
      for (const [a, b] of l.spans) {
        out.push(`<rect x="${x(a)}" y="${yy + 2}" width="${Math.max(2, x(b) - x(a))}" height="${rowH - 4}"` +
          ` fill="${online.has(reader) ? "#86efac" : "#d1d5db"}"/>`);
      }
      for (const mark of l.marks) {
        out.push(`<circle cx="${x(mark.t)}" cy="${yy + rowH / 2}" r="3.5" fill="${mark.kind === "joined" ? "#15803d" : "#b91c1c"}">` +
          `<title>${esc(reader)} ${mark.kind} at ${clock(mark.t)} (by ${esc(mark.by)})</title></circle>`);
      }
    });
    out.push(`<text x="${left}" y="${H - 6}">${clock(start)}</text>`);
    out.push(`<text x="${W - right}" y="${H - 6}" text-anchor="end">${clock(now)} (now)</text></svg>`);
    return out.join("");
  }

  return { segmentGraph, lagChart, timeline, esc, clock, fmt, color };
})();
