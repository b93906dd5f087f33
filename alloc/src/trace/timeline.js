// Draws vramguard's memory timeline from the JSON in #vg-data (see timeline.rs for its
// meaning): every allocation as a band stacked over time (memory_viz's active-memory view),
// allocated and reserved lines, label bands, OOM and segment map/unmap markers, and the
// segment map after any number of events (the slider). User strings only ever reach the page
// through textContent, never as markup.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("vg-data").textContent);
  var E = D.events, N = E.length, A = D.allocations, S = D.segments;
  var SVG = "http://www.w3.org/2000/svg";
  var KIND = { alloc: 0, free: 1, map: 2, unmap: 3, oom: 4 };
  var W = 1000, PLOT_H = 300, LEFT = 78, RIGHT = 24, TOP = 30, BOTTOM = 52;
  var xMode = "time";

  function human(b) {
    var units = [["TiB", 1099511627776], ["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (b >= units[i][1]) return (b / units[i][1]).toFixed(1) + " " + units[i][0];
    }
    return b + " B";
  }
  function humanTime(ns) {
    if (ns >= 1e9) return +(ns / 1e9).toPrecision(4) + " s";
    if (ns >= 1e6) return +(ns / 1e6).toPrecision(4) + " ms";
    if (ns >= 1e3) return +(ns / 1e3).toPrecision(4) + " µs";
    return ns + " ns";
  }
  function hex(a) { return "0x" + a.toString(16); }
  // Golden-angle hues: every label gets its own colour, none repeats.
  function hue(i) { return (i * 137.50776405) % 360; }
  function labelColor(i) { return "hsl(" + hue(i).toFixed(1) + ",80%,70%)"; }
  function allocColor(i) { return "hsl(" + ((hue(i) + 200) % 360).toFixed(1) + ",55%,52%)"; }
  function el(tag, attrs, parent, ns) {
    var e = ns === false ? document.createElement(tag) : document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, cls, anchor) {
    var t = el("text", { x: x, y: y, "class": cls || "", "text-anchor": anchor || "start" }, parent);
    t.textContent = s;
    return t;
  }

  // Positions: event i happens at pos(i); -1 is the start of the trace, N its end.
  var tEnd = N ? Math.max(E[N - 1][1], 1) : 1;
  // A trace dominated by one pause (an OOM's cache release, a slow backend call) reads
  // better in event order; the checkbox switches back.
  for (var e1 = 1; e1 < N; e1++) if (E[e1][1] - E[e1 - 1][1] > 0.4 * tEnd) xMode = "event";
  document.getElementById("vg-xmode").checked = xMode === "event";
  function pos(i) {
    if (xMode === "event") return i < 0 ? 0 : Math.min(i + 1, N);
    if (i < 0 || !N) return 0;
    return i >= N ? tEnd : E[i][1];
  }
  function domain() { return xMode === "event" ? Math.max(N, 1) : tEnd; }
  function X(p) { return LEFT + (p / domain()) * W; }

  // Which allocation each event starts or ends.
  var startAt = {}, endAt = {};
  A.forEach(function (a, i) {
    if (a.start >= 0) startAt[a.start] = i;
    if (a.end < N) endAt[a.end] = i;
  });

  function originLines(a) {
    var lines = [];
    var o = a.origin;
    if (o) {
      lines.push(o.file + ":" + o.line);
      lines.push(o.op + (o.shape ? " [" + o.shape.join(", ") + "]" : ""));
    } else {
      lines.push("source: not recorded");
    }
    return lines;
  }
  function allocTip(i) {
    var a = A[i];
    var lines = [human(a.size) + " at " + hex(a.addr) + (a.id ? " (allocation " + a.id + ")" : "")];
    lines = lines.concat(originLines(a));
    if (a.label !== null) lines.push("label: " + D.labels[a.label]);
    lines.push(
      (a.start < 0 ? "made before the trace" : "made at " + humanTime(E[a.start][1])) + ", " +
      (a.end >= N ? "live at the end" : "freed at " + humanTime(E[a.end][1]))
    );
    return lines;
  }

  // Tooltip shared by the chart and the segment map.
  var tip = document.getElementById("vg-tip");
  function showTip(lines, ev) {
    tip.textContent = "";
    lines.forEach(function (l, k) {
      var d = el(k ? "div" : "b", {}, tip, false);
      d.textContent = l;
    });
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - 14);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function tipFor(target) {
    var n = target.closest && target.closest("[data-a],[data-tip]");
    if (!n) return null;
    if (n.hasAttribute("data-a")) return allocTip(+n.getAttribute("data-a"));
    return n.getAttribute("data-tip").split("\n");
  }
  document.addEventListener("mousemove", function (ev) {
    var lines = tipFor(ev.target);
    if (lines) showTip(lines, ev);
    else tip.style.display = "none";
  });

  function niceStep(span, target, bases) {
    var raw = span / target;
    for (var k = 0; k < bases.length; k++) if (bases[k] >= raw) return bases[k];
    return bases[bases.length - 1];
  }
  function byteSteps() {
    var s = [];
    for (var u = 1; u <= 1099511627776; u *= 1024) [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].forEach(function (m) { s.push(m * u); });
    return s;
  }
  function decimalSteps() {
    var s = [];
    for (var u = 1; u <= 1e15; u *= 10) [1, 2, 5].forEach(function (m) { s.push(m * u); });
    return s;
  }

  // Stacks allocations as memory_viz does: a new one goes on top; a freed one leaves and
  // everything above it drops by its size. Each allocation gets the points of its bottom edge.
  function layout() {
    var stack = [], total = 0, pts = new Array(A.length), top = [[pos(-1), 0]];
    A.forEach(function (a, i) {
      if (a.start < 0) {
        stack.push(i);
        pts[i] = [[pos(-1), total]];
        total += a.size;
      }
    });
    top[0][1] = total;
    for (var e = 0; e < N; e++) {
      var k = E[e][0], p = pos(e);
      if (k === KIND.alloc && startAt[e] !== undefined) {
        var i = startAt[e];
        stack.push(i);
        pts[i] = [[p, total]];
        total += A[i].size;
      } else if (k === KIND.free && endAt[e] !== undefined) {
        var f = endAt[e], at = stack.indexOf(f);
        if (at >= 0) {
          var size = A[f].size;
          pts[f].push([p, pts[f][pts[f].length - 1][1]]);
          stack.splice(at, 1);
          for (var j = at; j < stack.length; j++) {
            var q = pts[stack[j]], last = q[q.length - 1][1];
            q.push([p, last], [p, last - size]);
          }
          total -= size;
        }
      } else {
        continue;
      }
      top.push([p, top[top.length - 1][1]], [p, total]);
    }
    stack.forEach(function (i) { pts[i].push([pos(N), pts[i][pts[i].length - 1][1]]); });
    top.push([pos(N), total]);
    return { pts: pts, top: top };
  }

  var chart, cursor;
  function drawChart() {
    var host = document.getElementById("vg-chart");
    host.textContent = "";
    if (!N) return;
    var L = layout();
    var maxB = 1;
    E.forEach(function (r) { maxB = Math.max(maxB, r[4], r[5]); });
    L.top.forEach(function (p) { maxB = Math.max(maxB, p[1]); });
    maxB = Math.max(maxB, D.end.peak_allocated_bytes);
    var yStep = niceStep(maxB, 5, byteSteps());
    var yMax = Math.ceil(maxB / yStep) * yStep;
    function Y(b) { return TOP + PLOT_H - (b / yMax) * PLOT_H; }
    chart = el("svg", {
      id: "vg-svg", viewBox: "0 0 " + (LEFT + W + RIGHT) + " " + (TOP + PLOT_H + BOTTOM),
      role: "img", "aria-label": "allocations over time"
    }, host);

    // Label bands: a lane with the names above the plot, a faint band behind it. The lane
    // leaves out what every label starts with (the legend and the tooltips have it whole).
    var common = D.labels.length > 1 ? D.labels.reduce(function (p, l) {
      var k = 0;
      while (k < p.length && k < l.length && p[k] === l[k]) k++;
      return p.slice(0, k);
    }) : "";
    // Cut back to the last separator, so "batch 3" keeps its word.
    var colon = common.lastIndexOf(": "), slash = common.lastIndexOf(" / ");
    var cut = Math.max(colon < 0 ? 0 : colon + 2, slash < 0 ? 0 : slash + 3);
    common = common.slice(0, cut);
    var bands = el("g", { "class": "bands" }, chart);
    D.bands.forEach(function (b) {
      var x1 = X(pos(b[1] - 1)), x2 = X(pos(b[2])), w = Math.max(x2 - x1, 1.5);
      var name = D.labels[b[0]], short = name.slice(common.length) || name;
      var g = el("g", { "class": "band", "data-tip": "label: " + name + "\nevents " + b[1] + "–" + b[2] }, bands);
      el("rect", { x: x1, y: TOP, width: w, height: PLOT_H, fill: labelColor(b[0]), "fill-opacity": 0.28 }, g);
      el("rect", { x: x1, y: 4, width: w, height: 18, fill: labelColor(b[0]) }, g);
      // The name, shortened with an ellipsis to the band's width (the legend has it whole).
      var fits = Math.floor((w - 6) / 6.6);
      if (fits >= 3) text(g, x1 + 3, 17, short.length <= fits ? short : short.slice(0, fits - 1) + "…", "lane");
    });

    // Y axis: bytes.
    var axis = el("g", { "class": "axis" }, chart);
    for (var v = 0; v <= yMax; v += yStep) {
      el("line", { x1: LEFT, x2: LEFT + W, y1: Y(v), y2: Y(v), "class": "grid" }, axis);
      text(axis, LEFT - 6, Y(v) + 4, human(v), "tick", "end");
    }
    // X axis: time (or event order).
    var span = domain();
    var xStep = niceStep(span, 8, decimalSteps());
    for (var t = 0; t <= span + 1e-9; t += xStep) {
      el("line", { x1: X(t), x2: X(t), y1: TOP + PLOT_H, y2: TOP + PLOT_H + 5, "class": "tickmark" }, axis);
      text(axis, X(t), TOP + PLOT_H + 17, xMode === "event" ? "event " + t : humanTime(t), "tick", "middle");
    }
    el("line", { x1: LEFT, x2: LEFT + W, y1: TOP + PLOT_H, y2: TOP + PLOT_H, "class": "axisline" }, axis);
    el("line", { x1: LEFT, x2: LEFT, y1: TOP, y2: TOP + PLOT_H, "class": "axisline" }, axis);

    // Everything allocated (some allocations are too small to draw one by one).
    var area = L.top.map(function (p) { return X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); });
    area.push(X(pos(N)).toFixed(1) + "," + Y(0), X(0).toFixed(1) + "," + Y(0));
    el("polygon", { "class": "others", points: area.join(" "), "data-tip": "allocations too small to draw one by one" }, chart);

    var blocks = el("g", { "class": "blocks" }, chart);
    A.forEach(function (a, i) {
      if (!a.drawn || !L.pts[i]) return;
      var p = L.pts[i], up = [], down = [];
      for (var k = 0; k < p.length; k++) {
        up.push(X(p[k][0]).toFixed(1) + "," + Y(p[k][1] + a.size).toFixed(1));
        down.push(X(p[k][0]).toFixed(1) + "," + Y(p[k][1]).toFixed(1));
      }
      el("polygon", { "class": "alloc", "data-a": i, fill: allocColor(i), points: up.concat(down.reverse()).join(" ") }, blocks);
    });

    function stepLine(col, cls, name) {
      var pts = [], prev = null;
      E.forEach(function (r, e) {
        var x = X(pos(e)).toFixed(1);
        if (prev !== null) pts.push(x + "," + prev);
        prev = Y(r[col]).toFixed(1);
        pts.push(x + "," + prev);
      });
      pts.push(X(pos(N)).toFixed(1) + "," + prev);
      el("polyline", { "class": cls, points: pts.join(" "), "data-tip": name }, chart);
    }
    stepLine(5, "reserved", "reserved bytes (segments held)");
    stepLine(4, "allocated", "allocated bytes (allocator statistics)");

    // The statistics' peak, from the earliest moment the last reset can have happened.
    var from = D.end.reset_after_event === null ? -1 : D.end.reset_after_event;
    var py = Y(D.end.peak_allocated_bytes);
    var peakName = D.end.reset_after_event === null
      ? "peak allocated (statistics): " + human(D.end.peak_allocated_bytes)
      : "peak allocated since the last reset: " + human(D.end.peak_allocated_bytes);
    var pg = el("g", { "class": "peak", "data-tip": peakName }, chart);
    el("line", { x1: X(pos(from)), x2: LEFT + W, y1: py, y2: py }, pg);
    text(pg, LEFT + W - 4, py - 4, peakName, "peaklabel", "end");

    // Segment map/unmap and OOM markers.
    var marks = el("g", { "class": "marks" }, chart);
    var lane = TOP + PLOT_H + 34;
    E.forEach(function (r, e) {
      var x = X(pos(e));
      if (r[0] === KIND.map || r[0] === KIND.unmap) {
        var up = r[0] === KIND.map;
        var d = up ? "M" + (x - 5) + "," + (lane + 8) + " L" + (x + 5) + "," + (lane + 8) + " L" + x + "," + lane + " Z"
                   : "M" + (x - 5) + "," + lane + " L" + (x + 5) + "," + lane + " L" + x + "," + (lane + 8) + " Z";
        el("path", {
          d: d, "class": up ? "segmark map" : "segmark unmap",
          "data-tip": (up ? "segment mapped: " : "segment unmapped: ") + human(r[3]) + " at " + hex(r[2]) +
            "\nat " + humanTime(r[1]) + ", reserved after: " + human(r[5])
        }, marks);
      } else if (r[0] === KIND.oom) {
        var g = el("g", { "class": "oom", "data-tip": "out of memory: a request of " + human(r[3]) +
          " failed at " + humanTime(r[1]) + "\nallocated " + human(r[4]) + ", reserved " + human(r[5]) }, marks);
        el("line", { x1: x, x2: x, y1: TOP, y2: TOP + PLOT_H }, g);
        el("rect", { x: x - 16, y: TOP + 2, width: 32, height: 15, rx: 3 }, g);
        text(g, x, TOP + 13, "OOM", "oomtext", "middle");
      }
    });

    cursor = el("line", { "class": "cursor", y1: TOP, y2: TOP + PLOT_H }, chart);
    chart.addEventListener("click", function (ev) {
      var r = chart.getBoundingClientRect();
      var px = (ev.clientX - r.left) / r.width * (LEFT + W + RIGHT);
      var p = (px - LEFT) / W * domain(), best = 0;
      for (var e = 0; e < N; e++) if (pos(e) <= p) best = e + 1;
      slider.value = best;
      moment();
    });
    moment();
  }

  // The segment map after `s` events: mapped ranges live then (adjacent runs of the
  // expandable segment joined), the allocations in them, and the free gaps between.
  function stateAt(s) {
    var ranges = S.filter(function (r) { return r.start < s && s <= r.end; })
      .sort(function (a, b) { return a.addr - b.addr; });
    var rows = [];
    ranges.forEach(function (r) {
      var last = rows[rows.length - 1];
      if (last && r.expandable && last.expandable && last.addr + last.size === r.addr) last.size += r.size;
      else rows.push({ addr: r.addr, size: r.size, pool: r.pool, expandable: r.expandable, blocks: [] });
    });
    var live = [];
    A.forEach(function (a, i) { if (a.start < s && s <= a.end) live.push(i); });
    live.sort(function (x, y) { return A[x].addr - A[y].addr; });
    var k = 0;
    rows.forEach(function (row) {
      while (k < live.length && A[live[k]].addr < row.addr) k++;
      while (k < live.length && A[live[k]].addr < row.addr + row.size) row.blocks.push(live[k++]);
    });
    return rows;
  }

  var slider = document.getElementById("vg-slider");
  function moment() {
    var s = +slider.value;
    if (cursor) {
      var x = X(s === 0 ? pos(-1) : pos(s - 1));
      cursor.setAttribute("x1", x);
      cursor.setAttribute("x2", x);
    }
    var rows = stateAt(s);
    var host = document.getElementById("vg-segmap");
    host.textContent = "";
    var largest = 1;
    rows.forEach(function (r) { largest = Math.max(largest, r.size); });
    var inactive = 0, cached = 0, biggest = 0;
    rows.forEach(function (row) {
      var div = el("div", { "class": "seg-row" }, host, false);
      var used = 0;
      row.blocks.forEach(function (i) { used += A[i].size; });
      var cap = el("div", { "class": "seg-cap" }, div, false);
      cap.textContent = human(row.size) + " " + (row.pool ? row.pool + " pool" : "segment") +
        (row.expandable ? " (expandable)" : "") + " at " + hex(row.addr) + ": " + row.blocks.length +
        " allocated block" + (row.blocks.length === 1 ? "" : "s") + ", " + human(used) + " allocated, " +
        human(Math.max(row.size - used, 0)) + " free";
      var bar = el("div", { "class": "seg-bar", style: "width:" + (row.size / largest * 100).toFixed(3) + "%" }, div, false);
      var at = row.addr, free = 0;
      function gap(to) {
        if (to <= at) return;
        var g = to - at;
        free += g;
        biggest = Math.max(biggest, g);
        el("div", {
          "class": "blk free", "data-tip": "free: " + human(g) + " at " + hex(at),
          style: "left:" + ((at - row.addr) / row.size * 100).toFixed(4) + "%;width:" + (g / row.size * 100).toFixed(4) + "%"
        }, bar, false);
      }
      row.blocks.forEach(function (i) {
        var a = A[i];
        gap(a.addr);
        var end = Math.min(a.addr + a.size, row.addr + row.size);
        el("div", {
          "class": "blk alloc", "data-a": i,
          style: "background:" + allocColor(i) + ";left:" + ((a.addr - row.addr) / row.size * 100).toFixed(4) +
            "%;width:" + ((end - a.addr) / row.size * 100).toFixed(4) + "%"
        }, bar, false);
        at = Math.max(at, end);
      });
      gap(row.addr + row.size);
      cached += free;
      if (row.blocks.length) inactive += free;
    });
    if (!rows.length) el("p", {}, host, false).textContent = "No segments mapped at this moment.";
    var last = s > 0 ? E[s - 1] : null;
    document.getElementById("vg-moment").textContent = s === 0
      ? "Before the first recorded event."
      : "After event " + s + " of " + N + " (" + humanTime(last[1]) + "): " + D.kinds[last[0]] + " " +
        human(last[3]) + (last[0] === KIND.oom ? "" : " at " + hex(last[2])) + "; allocated " +
        human(last[4]) + ", reserved " + human(last[5]) + (last[6] >= 0 ? "; label " + D.labels[last[6]] : "") + ".";
    var fr = document.getElementById("vg-frag");
    fr.setAttribute("data-inactive", inactive);
    fr.setAttribute("data-cached", cached);
    fr.setAttribute("data-largest", biggest);
    fr.textContent = "At this moment: inactive split " + human(inactive) + " (" + inactive + " bytes); cached free " +
      human(cached) + ", largest free block " + human(biggest) + ", so 1 − largest/cached free = " +
      (cached ? (100 * (1 - biggest / cached)).toFixed(1) : "0.0") + " %.";
  }
  slider.max = N;
  slider.value = N;
  slider.addEventListener("input", moment);

  // Buttons to the interesting moments: the start, each OOM, the end.
  var jumps = document.getElementById("vg-jumps");
  function jump(name, s) {
    var b = el("button", { type: "button" }, jumps, false);
    b.textContent = name;
    b.addEventListener("click", function () { slider.value = s; moment(); });
  }
  jump("start", 0);
  var ooms = 0;
  E.forEach(function (r, e) { if (r[0] === KIND.oom && ooms++ < 10) jump("OOM " + ooms + " (event " + (e + 1) + ")", e + 1); });
  jump("end", N);

  // Legend: every label with its colour.
  var legend = document.getElementById("vg-legend");
  D.labels.forEach(function (name, i) {
    var item = el("span", { "class": "legend-item" }, legend, false);
    el("span", { "class": "swatch", style: "background:" + labelColor(i) }, item, false);
    el("span", {}, item, false).textContent = name;
  });

  document.getElementById("vg-xmode").addEventListener("change", function (ev) {
    xMode = ev.target.checked ? "event" : "time";
    drawChart();
  });
  drawChart();
  if (!N) moment();
  document.body.setAttribute("data-ready", "1");
})();
