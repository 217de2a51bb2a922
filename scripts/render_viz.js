#!/usr/bin/env node
// render_viz.js: renders memory-snapshot pages written by PyTorch's
// `python -m torch.cuda._memory_viz trace_plot|segment_plot` in headless
// Chromium, with no network, and says whether they drew without script errors.
//
// Those pages import the viewer from a CDN (MemoryViz.js on jsdelivr, which in
// turn imports d3 v5 modules from skypack). This script never reaches the
// network: it serves the page itself from a fake origin and answers the viewer
// URL with VIEWER_DIR/MemoryViz.js and every skypack d3 URL with one ES-module
// bundle of d3@5, VIEWER_DIR/d3.esm.js (one bundle for all five d3 imports, so
// they share one d3-selection and d3.event works). Any other request is
// refused and counted. Neither file is part of this repository.
//
// Invariants: the page's own bytes are served unchanged; a page counts as
// rendered only when its SVG holds drawn shapes; the exit status is 0 only
// when every page rendered with no page error, no console error and no
// refused or failed request.
//
// Usage (playwright-core from npm, Debian's /usr/bin/chromium):
//   NODE_PATH=DIR/node_modules node scripts/render_viz.js --viewer DIR \
//     [--shot PAGE.html=OUT.png]... [--event PAGE.html=N]... PAGE.html...
// --event clicks line N of a segment view's event list before the screenshot,
// as a user would, so the picture shows the pool at that point of the trace.
'use strict';

const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

const ORIGIN = 'http://viz.local/';
const VIEWER_URL = 'https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js';
const D3_PREFIX = 'https://cdn.skypack.dev/';

function parseArgs(argv) {
  const args = { viewer: null, shots: {}, events: {}, pages: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--viewer') {
      args.viewer = argv[++i];
    } else if (argv[i] === '--shot') {
      const [page, out] = (argv[++i] || '').split('=');
      args.shots[page] = out;
    } else if (argv[i] === '--event') {
      const [page, n] = (argv[++i] || '').split('=');
      args.events[page] = Number(n);
    } else {
      args.pages.push(argv[i]);
    }
  }
  return args;
}

function readViewer(dir) {
  const viewer = fs.readFileSync(path.join(dir, 'MemoryViz.js'));
  const d3 = fs.readFileSync(path.join(dir, 'd3.esm.js'));
  return { viewer, d3 };
}

function jsBody(body) {
  return { status: 200, contentType: 'text/javascript', body,
    headers: { 'Access-Control-Allow-Origin': '*' } };
}

async function routeAll(page, file, files, refused) {
  const html = fs.readFileSync(file);
  await page.route('**/*', route => {
    const url = route.request().url();
    if (url === ORIGIN + path.basename(file)) {
      return route.fulfill({ status: 200, contentType: 'text/html', body: html });
    }
    if (url === VIEWER_URL) return route.fulfill(jsBody(files.viewer));
    if (url.startsWith(D3_PREFIX)) return route.fulfill(jsBody(files.d3));
    refused.push(url);
    return route.abort();
  });
}

// What the viewer drew: polygons (trace views), rects (segment view), of
// which segments are the black-edged ones, and its event list's lines.
function countShapes(EVENT_LINES_IN_PAGE) {
  return {
    polygons: document.querySelectorAll('svg polygon').length,
    rects: document.querySelectorAll('svg rect').length,
    segments: document.querySelectorAll('svg rect[stroke="black"]').length,
    events: document.querySelectorAll(EVENT_LINES_IN_PAGE).length,
    view: (document.querySelectorAll('select')[1] || {}).value || '',
  };
}

const EVENT_LINES = 'div[style*="monospace"] > pre';

// Clicks event line n (0-based) and returns the viewer's own summary line.
async function selectEvent(page, n) {
  await page.locator(EVENT_LINES).nth(n).dispatchEvent('mousedown');
  await page.waitForTimeout(500);
  return page.evaluate(() => {
    const pres = document.querySelectorAll('pre[style*="grid-row: 2"]');
    return pres.length ? pres[0].textContent.split('\n').slice(0, 2).join(' | ') : '';
  });
}

async function renderPage(browser, file, files, shot, event) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const report = { page: path.basename(file), pageErrors: [], consoleErrors: [],
    warnings: 0, refused: [], failed: [] };
  page.on('pageerror', e => report.pageErrors.push(String(e)));
  page.on('console', m => {
    if (m.type() === 'error') report.consoleErrors.push(m.text());
    if (m.type() === 'warning') report.warnings++;
  });
  page.on('requestfailed', r => report.failed.push(r.url()));
  await routeAll(page, file, files, report.refused);
  await page.goto(ORIGIN + path.basename(file), { waitUntil: 'load' });
  await page.waitForFunction(
    () => document.querySelectorAll('svg polygon, svg rect').length > 0,
    null, { timeout: 30000 }).catch(() => {});
  await page.waitForTimeout(1000);
  if (event !== undefined) report.selected = await selectEvent(page, event);
  Object.assign(report, await page.evaluate(countShapes, EVENT_LINES));
  if (shot) {
    await page.screenshot({ path: shot });
    report.screenshot = `${shot} (${fs.statSync(shot).size} bytes)`;
  }
  await page.close();
  return report;
}

function pageOk(r) {
  return r.pageErrors.length === 0 && r.consoleErrors.length === 0 &&
    r.refused.length === 0 && r.failed.length === 0 && r.polygons + r.rects > 0;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.viewer || args.pages.length === 0) {
    console.error('usage: render_viz.js --viewer DIR [--shot PAGE=OUT.png]... ' +
      '[--event PAGE=N]... PAGE.html...');
    process.exit(2);
  }
  const files = readViewer(args.viewer);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let ok = true;
  for (const file of args.pages) {
    const r = await renderPage(browser, file, files, args.shots[file], args.events[file]);
    ok = ok && pageOk(r);
    console.log(JSON.stringify(r));
  }
  await browser.close();
  console.log(ok ? 'PASS' : 'FAIL');
  process.exit(ok ? 0 : 1);
}

main().catch(e => { console.error(`render_viz: ${e.message}`); process.exit(2); });
