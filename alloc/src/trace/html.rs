//! A self-contained HTML page (inline CSS, script and SVG; no network, no external file): the
//! allocator's statistics with an honest fragmentation figure, every allocation's lifetime over
//! time stacked as memory_viz's active-memory view (source line, op and shape on hover),
//! allocated and reserved lines with axis ticks, trace labels as coloured bands, OOM and
//! segment map/unmap markers, and the segment map after any number of events (a slider).
//!
//! This file writes the page's frame and static parts; `timeline.rs` owns the data embedded in
//! it and `timeline.js` / `timeline.css` draw it.

use super::timeline::{TimelineData, MAX_DRAWN_ALLOCATIONS};
use super::{MemorySnapshot, Trace};
use crate::human_bytes;
use std::fmt::Write as _;

const SCRIPT: &str = include_str!("timeline.js");
const STYLE: &str = include_str!("timeline.css");

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

/// Renders the page for `trace` and the `snapshot` taken right after it (the segment map at
/// earlier moments is rebuilt by undoing the trace's events from it). `title` names the page
/// (e.g. the example or run).
pub fn html_report(title: &str, trace: &Trace, snapshot: &MemorySnapshot) -> String {
    let data = TimelineData::new(trace, snapshot);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{t}</title>\n\
         <style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n<p>Device <b>{d}</b>, {mode}.</p>\n",
        t = esc(title),
        d = esc(&snapshot.device),
        mode = if snapshot.expandable_segments {
            "expandable segments"
        } else {
            "fixed segments"
        }
    );
    stats_table(&mut h, snapshot, &data);
    timeline_section(&mut h, trace, &data);
    segment_section(&mut h, &data);
    let _ = write!(
        h,
        "<div id=\"vg-tip\" role=\"tooltip\"></div>\n\
         <script type=\"application/json\" id=\"vg-data\">{}</script>\n<script>{SCRIPT}</script>\n\
         </body></html>\n",
        data.to_script_json()
    );
    h
}

fn stats_table(h: &mut String, snap: &MemorySnapshot, data: &TimelineData) {
    let s = &snap.stats;
    let f = &data.end.fragmentation;
    let peak_note = match data.end.reset_after_event {
        Some(e) => format!(
            "since the last <code>reset_peak_stats</code>, which came after event {} of the \
             trace: the chart's highest allocated ({}) is earlier",
            e + 1,
            human_bytes(data.max_allocated())
        ),
        None => "since the allocator was created or its last <code>reset_peak_stats</code> (the \
                 dashed violet line on the chart)"
            .to_owned(),
    };
    let rows: [(&str, String, String); 11] = [
        ("allocated", human_bytes(s.allocated_bytes), String::new()),
        (
            "peak allocated",
            human_bytes(s.peak_allocated_bytes),
            peak_note.clone(),
        ),
        ("reserved", human_bytes(s.reserved_bytes), String::new()),
        (
            "peak reserved",
            human_bytes(s.peak_reserved_bytes),
            "same window as the peak allocated".to_owned(),
        ),
        (
            "cached free",
            human_bytes(f.cached_free_bytes),
            "free bytes in the segments held".to_owned(),
        ),
        (
            "largest free block",
            human_bytes(f.largest_free_block),
            "the largest request the cache serves without a new segment".to_owned(),
        ),
        (
            "inactive split",
            human_bytes(f.inactive_split_bytes),
            "PyTorch's inactive-split bytes: free bytes in segments that also hold allocated \
             blocks, cached but not returnable to the device until those blocks are freed"
                .to_owned(),
        ),
        (
            "fragmentation",
            format!("{:.1} %", f.free_split_ratio * 100.0),
            "1 − largest free block / cached free: the share of the cached free memory that one \
             request cannot use (0 % when the free memory is one block)"
                .to_owned(),
        ),
        ("segments", snap.segments.len().to_string(), String::new()),
        (
            "backend allocs / frees",
            format!("{} / {}", s.backend_allocs, s.backend_frees),
            String::new(),
        ),
        (
            "alloc retries / OOMs",
            format!("{} / {}", s.alloc_retries, s.num_ooms),
            String::new(),
        ),
    ];
    h.push_str("<h2>Statistics at the end</h2>\n<table id=\"vg-stats\">\n");
    for (name, value, note) in rows {
        let _ = writeln!(
            h,
            "<tr><th>{name}</th><td>{value}</td><td class=\"note\">{note}</td></tr>"
        );
    }
    h.push_str("</table>\n");
}

fn timeline_section(h: &mut String, trace: &Trace, data: &TimelineData) {
    h.push_str("<h2>Allocations over time</h2>\n");
    if trace.events.is_empty() {
        h.push_str(
            "<p>No events recorded. Turn the trace on with <code>memory::record_trace(&amp;device, \
             n)</code> or <code>trace_capacity:n</code> in <code>VRAMGUARD_ALLOC_CONF</code>.</p>\n",
        );
    }
    let drawn = data.allocations.iter().filter(|a| a.drawn).count();
    let _ = writeln!(
        h,
        "<p class=\"def\">Each band is one allocation, from the event that made it to the one \
         that freed it, stacked as PyTorch's memory_viz does (a freed allocation leaves a gap \
         that the ones above fall into); hover for its size, source line, op and shape. \
         {drawn} of {total} allocations are drawn one by one{elided}. Red: reserved bytes; \
         thin black: allocated bytes; dashed violet: the statistics' peak allocated; OOM: a \
         failed request; below the time axis, green ▲: a segment mapped, orange ▼: one \
         unmapped. {events} events{dropped}. Labels (batch-scope iterations, tags): \
         coloured bands above the chart. Click the chart to move the segment map below to \
         that moment.</p>\n<label><input type=\"checkbox\" id=\"vg-xmode\"> x axis: event order \
         instead of time</label>\n<div id=\"vg-chart\"></div>\n<div id=\"vg-legend\"></div>",
        total = data.allocations.len(),
        elided = if drawn < data.allocations.len() {
            format!(" (the {MAX_DRAWN_ALLOCATIONS} largest; the grey area holds the others)")
        } else {
            String::new()
        },
        events = trace.events.len(),
        dropped = if trace.dropped > 0 {
            format!(
                "; {} older events were dropped by the ring (its capacity is {}), so allocations \
                 made before the first one start at the left edge",
                trace.dropped, trace.capacity
            )
        } else {
            String::new()
        },
    );
}

fn segment_section(h: &mut String, data: &TimelineData) {
    let _ = writeln!(
        h,
        "<h2>Segments at any moment</h2>\n<p class=\"def\">The slider replays the {} events: \
         the segment map after each one (the end is the snapshot). Coloured: allocated blocks \
         (hover for source line, op, shape); grey: cached free memory.</p>\n\
         <input type=\"range\" id=\"vg-slider\" min=\"0\" max=\"{n}\" value=\"{n}\" \
         aria-label=\"events replayed\">\n<div id=\"vg-jumps\"></div>\n<p id=\"vg-moment\"></p>\n\
         <p id=\"vg-frag\" class=\"def\"></p>\n<div id=\"vg-segmap\"></div>",
        data.events.len(),
        n = data.events.len()
    );
}
