// Opens a vramguard HTML report in Debian's chromium (headless, no network) and checks that it
// draws and works: no script error, no request leaves the file, the DOM holds exactly the
// blocks, labels and markers the embedded data describes, the chart is not blank (pixels
// counted on a screenshot), hovering an allocation shows its tooltip with size and source,
// the slider replays the segment map, and the page's fragmentation at the end equals the
// figure computed in Rust. Usage: node check.mjs REPORT.html [SCREENSHOT.png]
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [reportArg, shotArg] = process.argv.slice(2);
if (!reportArg) {
  console.error("usage: node check.mjs REPORT.html [SCREENSHOT.png]");
  process.exit(2);
}
const report = resolve(reportArg);
const html = readFileSync(report, "utf8");
const open = '<script type="application/json" id="vg-data">';
const start = html.indexOf(open) + open.length;
const data = JSON.parse(html.slice(start, html.indexOf("</script>", start)));

// What the page must show, counted from the embedded data alone.
const kindCount = (k) => data.events.filter((e) => e[0] === k).length;
const expected = {
  drawnAllocations: data.allocations.filter((a) => a.drawn).length,
  bands: data.bands.length,
  labels: data.labels.length,
  ooms: kindCount(4),
  segmentMarks: kindCount(2) + kindCount(3),
  segmentRows: data.end.segments,
  liveBlocks: data.end.live_blocks,
};

const failures = [];
function check(ok, what) {
  if (!ok) failures.push(what);
}

const profile = mkdtempSync(join(tmpdir(), "vramguard-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const outside = [];
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (url.startsWith("file:")) return route.continue();
    outside.push(url);
    return route.abort();
  });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(pathToFileURL(report).href);
  await page.waitForSelector("body[data-ready='1']", { timeout: 20000 });

  const count = (sel) => page.locator(sel).count();
  const got = {
    drawnAllocations: await count("#vg-chart polygon.alloc"),
    bands: await count("#vg-chart g.band"),
    labels: await count("#vg-legend .legend-item"),
    ooms: await count("#vg-chart g.oom"),
    segmentMarks: await count("#vg-chart path.segmark"),
    segmentRows: await count("#vg-segmap .seg-row"),
    liveBlocks: await count("#vg-segmap .blk.alloc"),
  };
  for (const k of Object.keys(expected)) {
    check(got[k] === expected[k], `${k}: the DOM has ${got[k]}, the data ${expected[k]}`);
  }

  // The replayed end state has the snapshot's fragmentation figures.
  const frag = await page.locator("#vg-frag").evaluate((e) => ({
    inactive: +e.dataset.inactive,
    cached: +e.dataset.cached,
    largest: +e.dataset.largest,
  }));
  const f = data.end.fragmentation;
  check(
    frag.inactive === f.inactive_split_bytes &&
      frag.cached === f.cached_free_bytes &&
      frag.largest === f.largest_free_block,
    `fragmentation at the end: page ${JSON.stringify(frag)}, Rust ${JSON.stringify(f)}`
  );

  // The chart draws: pixels of its screenshot that are not the white background.
  const chart = page.locator("#vg-chart svg");
  check((await chart.count()) === 1, "the chart's <svg> is missing");
  const png = (await chart.count()) === 1 ? await chart.screenshot() : await page.screenshot();
  const pixels = await page.evaluate(async (b64) => {
    const img = new Image();
    img.src = "data:image/png;base64," + b64;
    await img.decode();
    const c = document.createElement("canvas");
    c.width = img.width;
    c.height = img.height;
    const g = c.getContext("2d");
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let drawn = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) drawn++;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    }
    return { drawn, total: d.length / 4, colours: colours.size };
  }, png.toString("base64"));
  const share = pixels.drawn / pixels.total;
  check(share > 0.1, `chart nearly blank: ${(share * 100).toFixed(1)} % drawn pixels`);
  check(pixels.colours > 20, `chart has only ${pixels.colours} colours`);

  // Hover: the largest drawn allocation, at a point where it is the topmost element.
  const tipWanted = async (index) => {
    const a = data.allocations[index];
    const lines = [];
    if (a.origin) {
      lines.push(`${a.origin.file}:${a.origin.line}`);
      lines.push(a.origin.op + (a.origin.shape ? ` [${a.origin.shape.join(", ")}]` : ""));
    } else {
      lines.push("source: not recorded");
    }
    return lines;
  };
  // Allocations made by the program's own lines (not the library's) first: the tooltip the
  // screenshot shows is then one a user would look for.
  const userMade = data.allocations.map((a) => !!a.origin && !/^(alloc|memory|tensor)\//.test(a.origin.file));
  const target = await page.evaluate((userMade) => {
    const polys = [...document.querySelectorAll("#vg-chart polygon.alloc")];
    polys.sort((p, q) => {
      const a = p.getBoundingClientRect(), b = q.getBoundingClientRect();
      const byOrigin = userMade[+q.dataset.a] - userMade[+p.dataset.a];
      return byOrigin || b.width * b.height - a.width * a.height;
    });
    for (const p of polys.slice(0, 50)) {
      const r = p.getBoundingClientRect();
      for (let i = 1; i < 10; i++) {
        for (let j = 1; j < 10; j++) {
          const x = r.left + (r.width * i) / 10, y = r.top + (r.height * j) / 10;
          if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) continue;
          if (document.elementFromPoint(x, y) === p) return { x, y, index: +p.dataset.a };
        }
      }
    }
    return null;
  }, userMade);
  check(target !== null, "no allocation band can be hovered");
  if (target) {
    await page.mouse.move(target.x, target.y);
    const tip = page.locator("#vg-tip");
    await tip.waitFor({ state: "visible", timeout: 5000 });
    const text = await tip.innerText();
    for (const want of await tipWanted(target.index)) {
      check(text.includes(want), `chart tooltip lacks "${want}": ${JSON.stringify(text)}`);
    }
    check(text.includes("0x" + data.allocations[target.index].addr.toString(16)), `chart tooltip lacks the address: ${JSON.stringify(text)}`);
  }
  // Hover in the segment map: the widest block, scrolled into view.
  const spot = await page.evaluate(() => {
    const blocks = [...document.querySelectorAll("#vg-segmap .blk.alloc")];
    blocks.sort((p, q) => q.getBoundingClientRect().width - p.getBoundingClientRect().width);
    const b = blocks[0];
    if (!b) return null;
    b.scrollIntoView({ block: "center" });
    const r = b.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    return document.elementFromPoint(x, y) === b ? { x, y, index: +b.dataset.a } : null;
  });
  check(expected.liveBlocks === 0 || spot !== null, "no segment-map block can be hovered");
  if (spot) {
    await page.mouse.move(spot.x, spot.y);
    const text = await page.locator("#vg-tip").innerText();
    for (const want of await tipWanted(spot.index)) {
      check(text.includes(want), `segment map tooltip lacks "${want}": ${JSON.stringify(text)}`);
    }
  }

  // The slider replays: at 0 events only what predates the trace is mapped.
  await page.locator("#vg-slider").evaluate((s) => {
    s.value = 0;
    s.dispatchEvent(new Event("input"));
  });
  const rowsAtStart = await count("#vg-segmap .seg-row");
  const mappedAtStart = data.segments.filter((r) => r.start < 0).length;
  check(
    mappedAtStart === 0 ? rowsAtStart === 0 : rowsAtStart > 0,
    `slider at 0: ${rowsAtStart} segment rows, ${mappedAtStart} ranges predate the trace`
  );
  await page.locator("#vg-slider").evaluate((s) => {
    s.value = s.max;
    s.dispatchEvent(new Event("input"));
  });
  check((await count("#vg-segmap .seg-row")) === expected.segmentRows, "slider back at the end");

  check(errors.length === 0, `script errors: ${errors.join("; ")}`);
  check(outside.length === 0, `requests outside the file: ${outside.join(", ")}`);

  if (shotArg) {
    // The picture: the chart with one allocation's tooltip, as a user sees it on hover.
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.locator("#vg-chart").scrollIntoViewIfNeeded();
    const box = await page.locator("#vg-chart").boundingBox();
    if (target) await page.mouse.move(target.x, target.y);
    await page.screenshot({
      path: resolve(shotArg),
      clip: { x: 0, y: Math.max(0, box.y - 40), width: 1280, height: Math.min(900, box.height + 200) },
    });
  }
  if (failures.length) {
    console.error(`browser check FAILED for ${reportArg}:\n  ` + failures.join("\n  "));
    process.exitCode = 1;
  } else {
    console.log(
      `browser check passed: ${reportArg}: ${got.drawnAllocations} allocation bands, ${got.bands} label bands, ` +
        `${got.labels} labels, ${got.ooms} OOM, ${got.segmentMarks} segment map/unmap marks, ` +
        `${got.segmentRows} segments with ${got.liveBlocks} live blocks at the end; ` +
        `${(share * 100).toFixed(1)} % of the chart drawn in ${pixels.colours} colours; tooltip shows the source`
    );
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
