//! A self-contained HTML page (inline SVG, no script, no external files) showing allocated vs
//! reserved bytes over time from the event trace, shaded by trace label (e.g. batch scope),
//! and a segment map from a snapshot that makes fragmentation visible.

use super::{human_bytes, MemorySnapshot, Trace};
use std::fmt::Write as _;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 260.0;
const LABEL_COLORS: [&str; 6] = [
    "#fde68a", "#bfdbfe", "#bbf7d0", "#fecaca", "#ddd6fe", "#fed7aa",
];

/// Escapes text for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Renders the page. `title` names it (e.g. the example or run).
pub fn html_report(title: &str, trace: &Trace, snapshot: &MemorySnapshot) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n\
         <style>body{{font:14px system-ui,sans-serif;margin:24px;color:#111}}\
         table{{border-collapse:collapse}}td,th{{padding:2px 10px;text-align:right}}\
         th{{text-align:left}}.blk.alloc{{fill:#2563eb}}.blk.free{{fill:#e5e7eb}}\
         .seg{{fill:none;stroke:#6b7280}}.reserved{{fill:#fca5a5;fill-opacity:.5;stroke:#dc2626}}\
         .allocated{{fill:none;stroke:#1d4ed8;stroke-width:1.5}}</style></head><body>\n\
         <h1>{t}</h1>\n<p>Device <b>{d}</b>, {mode}.</p>\n",
        t = esc(title),
        d = esc(&snapshot.device),
        mode = if snapshot.expandable_segments {
            "expandable segments"
        } else {
            "fixed segments"
        }
    );
    stats_table(&mut h, snapshot);
    timeline(&mut h, trace);
    segment_map(&mut h, snapshot);
    h.push_str("</body></html>\n");
    h
}

fn stats_table(h: &mut String, snap: &MemorySnapshot) {
    let s = &snap.stats;
    let rows: [(&str, String); 10] = [
        ("allocated", human_bytes(s.allocated_bytes)),
        ("peak allocated", human_bytes(s.peak_allocated_bytes)),
        ("reserved", human_bytes(s.reserved_bytes)),
        ("peak reserved", human_bytes(s.peak_reserved_bytes)),
        ("cached free", human_bytes(s.cached_free_bytes)),
        ("largest free block", human_bytes(s.largest_free_block)),
        ("fragmentation", format!("{:.1} %", s.fragmentation * 100.0)),
        ("segments", s.segments.to_string()),
        (
            "backend allocs / frees",
            format!("{} / {}", s.backend_allocs, s.backend_frees),
        ),
        (
            "alloc retries / OOMs",
            format!("{} / {}", s.alloc_retries, s.num_ooms),
        ),
    ];
    h.push_str("<h2>Statistics</h2>\n<table>\n");
    for (name, value) in rows {
        let _ = writeln!(h, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    h.push_str("</table>\n");
}

fn timeline(h: &mut String, trace: &Trace) {
    h.push_str("<h2>Allocated and reserved over time</h2>\n");
    if trace.events.is_empty() {
        h.push_str(
            "<p>No events recorded. Turn the trace on with <code>memory::record_trace(&amp;device, \
             n)</code> or <code>trace_capacity:n</code> in <code>VRAMGUARD_ALLOC_CONF</code>.</p>\n",
        );
        return;
    }
    let t0 = trace.events[0].time_ns;
    let t1 = trace.events[trace.events.len() - 1].time_ns.max(t0 + 1);
    let top = trace
        .events
        .iter()
        .map(|e| e.reserved_bytes.max(e.allocated_bytes))
        .max()
        .unwrap_or(1)
        .max(1);
    let x = |t: u64| (t - t0) as f64 / (t1 - t0) as f64 * WIDTH;
    let y = |b: u64| HEIGHT - b as f64 / top as f64 * (HEIGHT - 20.0);
    let _ = writeln!(
        h,
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         role=\"img\" aria-label=\"allocated and reserved bytes over time\">"
    );
    // Label bands: runs of consecutive events with the same label.
    let labels: Vec<Option<String>> = trace
        .events
        .iter()
        .map(|e| e.label.as_ref().map(|l| l.to_string()))
        .collect();
    let mut colors: Vec<&str> = Vec::new();
    let mut run_start = 0usize;
    for i in 1..=trace.events.len() {
        let same = i < labels.len() && labels[i] == labels[run_start];
        if same {
            continue;
        }
        if let Some(label) = &labels[run_start] {
            let idx = match colors.iter().position(|c| *c == label) {
                Some(p) => p,
                None => {
                    colors.push(label);
                    colors.len() - 1
                }
            };
            let (a, b) = (
                x(trace.events[run_start].time_ns),
                x(trace.events[i - 1].time_ns),
            );
            let _ = writeln!(
                h,
                "<rect class=\"band\" x=\"{a:.1}\" y=\"0\" width=\"{w:.1}\" height=\"{HEIGHT}\" \
                 fill=\"{c}\" fill-opacity=\".5\"><title>{l}</title></rect>",
                w = (b - a).max(1.0),
                c = LABEL_COLORS[idx % LABEL_COLORS.len()],
                l = esc(label)
            );
        }
        run_start = i;
    }
    let step_line = |value: &dyn Fn(&super::TraceEvent) -> u64, closed: bool| {
        let mut pts = String::new();
        let mut prev = y(0);
        if closed {
            let _ = write!(pts, "0,{HEIGHT} ");
        }
        for e in &trace.events {
            let (px, py) = (x(e.time_ns), y(value(e)));
            let _ = write!(pts, "{px:.1},{prev:.1} {px:.1},{py:.1} ");
            prev = py;
        }
        if closed {
            let _ = write!(pts, "{WIDTH},{prev:.1} {WIDTH},{HEIGHT}");
        }
        pts
    };
    let _ = writeln!(
        h,
        "<polygon class=\"reserved\" points=\"{}\"><title>reserved</title></polygon>",
        step_line(&|e| e.reserved_bytes, true)
    );
    let _ = writeln!(
        h,
        "<polyline class=\"allocated\" points=\"{}\"><title>allocated</title></polyline>",
        step_line(&|e| e.allocated_bytes, false)
    );
    let _ = writeln!(
        h,
        "<text x=\"4\" y=\"14\">{} (top of the chart)</text></svg>",
        human_bytes(top)
    );
    // A visible legend: hover titles do not survive a screenshot or a printout.
    if !colors.is_empty() {
        let _ = write!(h, "<p class=\"legend\">");
        for (idx, label) in colors.iter().enumerate() {
            let _ = write!(
                h,
                "<span style=\"background:{c};opacity:.8;padding:0 .4em;margin-right:.8em\">{l}</span>",
                c = LABEL_COLORS[idx % LABEL_COLORS.len()],
                l = esc(label)
            );
        }
        let _ = writeln!(h, "</p>");
    }
    let _ = writeln!(
        h,
        "<p>Red: reserved; blue line: allocated; {} events over {:.3} ms{}. Shaded bands: trace \
         labels (named above; hover for the name).</p>",
        trace.events.len(),
        (t1 - t0) as f64 / 1e6,
        if trace.dropped > 0 {
            format!(" ({} older events dropped by the ring)", trace.dropped)
        } else {
            String::new()
        }
    );
}

fn segment_map(h: &mut String, snap: &MemorySnapshot) {
    h.push_str("<h2>Segments</h2>\n");
    if snap.segments.is_empty() {
        h.push_str("<p>No segments reserved.</p>\n");
        return;
    }
    let largest = snap
        .segments
        .iter()
        .map(|s| s.size)
        .max()
        .unwrap_or(1)
        .max(1);
    let row = 22.0;
    let height = row * snap.segments.len() as f64 + 4.0;
    let _ = writeln!(
        h,
        "<svg viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" \
         role=\"img\" aria-label=\"segment map\">"
    );
    for (i, seg) in snap.segments.iter().enumerate() {
        let y0 = i as f64 * row + 2.0;
        let scale = (WIDTH - 200.0) / largest as f64;
        for b in &seg.blocks {
            let bx = (b.addr - seg.addr) as f64 * scale;
            let _ = writeln!(
                h,
                "<rect class=\"blk {cls}\" x=\"{bx:.2}\" y=\"{y0:.1}\" width=\"{w:.2}\" \
                 height=\"{hh}\"><title>{cls} {size} at {addr:#x}{extra}</title></rect>",
                cls = if b.allocated { "alloc" } else { "free" },
                w = (b.size as f64 * scale).max(0.5),
                hh = row - 6.0,
                size = human_bytes(b.size),
                addr = b.addr,
                extra = if b.allocated {
                    format!(", id {}, requested {} bytes", b.id, b.requested)
                } else {
                    String::new()
                },
            );
        }
        let _ = writeln!(
            h,
            "<rect class=\"seg\" x=\"0\" y=\"{y0:.1}\" width=\"{w:.2}\" height=\"{hh}\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\">{size} {pool:?}{exp}</text>",
            w = seg.size as f64 * scale,
            hh = row - 6.0,
            tx = WIDTH - 195.0,
            ty = y0 + 12.0,
            size = human_bytes(seg.size),
            pool = seg.pool,
            exp = if seg.expandable { " (expandable)" } else { "" },
        );
    }
    h.push_str("</svg>\n<p>Blue: allocated blocks; grey: cached free blocks (hover for sizes). Many grey gaps between blue blocks is fragmentation.</p>\n");
}
