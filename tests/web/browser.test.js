/*  browser.test.js: onceq-web in headless Chromium (tests/web/run.sh sets
    the paths). The real broker over CURVE, onceq-test-worker processes and
    the onceq tool; the browser is driven over the DevTools protocol by
    puppeteer-core. It proves, in order:
      - the overview shows the queues and counts `onceq stats --json` has;
      - a request without login is refused, an action without its CSRF
        token is refused, a viewer sees no action button and gets 403 when
        it posts;
      - a failed job is retried by clicking, then runs and is done;
      - a review job is resolved by clicking, with a note, and `onceq
        review list` no longer has it;
      - a worker killed mid-job leaves the workers page by itself (live
        updates, no reload) within the broker's liveness window;
      - bad input (an unknown id, a huge query string, a malformed form)
        gets an error page, and onceq-web and the broker still answer.
    Each page's screenshot is saved in $SCREENSHOTS and checked for size.
    Every wait has a deadline; the whole run ends within S_TOTAL_MS. */
'use strict';
const { spawn, execFileSync, spawnSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

const S_TOTAL_MS = 85000;    /* the whole test */
const S_WAIT_MS = 20000;     /* any one condition */
const S_POLL_MS = 100;       /* between two looks at a condition */
const S_MIN_PNG_BYTES = 8000; /* a screenshot of a rendered page, not a blank */
const S_MAX_PNG_BYTES = 8 * 1024 * 1024;
const S_HEARTBEAT_MS = 200;  /* the broker's, so that the liveness window is short */
const S_LIVENESS = 5;        /* missed heartbeats: a 1 s window */
const PASSWORD = 'pw-' + process.pid;

const BIN = process.env.ONCEQ_BIN;
const SHOTS = process.env.SCREENSHOTS;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'onceq-web-'));
const procs = [];
let browser = null;

function cleanup() {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
}
process.on('exit', cleanup);
const overall = setTimeout(() => {
  console.error(`web.browser: FAILED: not done within ${S_TOTAL_MS} ms; logs in ${dir}`);
  cleanup();
  process.exit(1);
}, S_TOTAL_MS);

function fail(message) {
  throw new Error(message);
}

function start(name, bin, args) {
  const log = fs.openSync(path.join(dir, name + '.log'), 'w');
  const p = spawn(path.join(BIN, bin), args, { stdio: ['ignore', log, log] });
  procs.push(p);
  return p;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
  });
}

async function waitFor(what, cond) {
  const end = Date.now() + S_WAIT_MS;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, S_POLL_MS));
  }
}

let env = null;
function onceq(args, allowFail) {
  const r = spawnSync(path.join(BIN, 'onceq'), args, { env, encoding: 'utf8', timeout: S_WAIT_MS });
  if (r.status !== 0 && !allowFail) fail(`onceq ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return r;
}
function stats() {
  return JSON.parse(onceq(['stats', '--json']).stdout);
}
function queue(s, name) {
  return (s.queues || []).find((q) => q.name === name) || {};
}

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  const size = fs.statSync(file).size;
  if (size < S_MIN_PNG_BYTES || size > S_MAX_PNG_BYTES)
    fail(`screenshot ${name}.png is ${size} bytes: expected ${S_MIN_PNG_BYTES} to ${S_MAX_PNG_BYTES}`);
  console.log(`screenshot ${file} (${size} bytes)`);
}

async function main() {
  const front = `tcp://127.0.0.1:${await freePort()}`;
  const back = `tcp://127.0.0.1:${await freePort()}`;
  const keys = path.join(dir, 'keys');
  const ck = path.join(dir, 'client-keys');
  for (const d of ['producers', 'workers', 'admins']) fs.mkdirSync(path.join(keys, d), { recursive: true });
  const keygen = (d, name) => execFileSync(path.join(BIN, 'onceq'), ['keygen', '--dir', d, name]);
  keygen(keys, 'broker');
  for (const name of ['web', 'ops', 'worker']) keygen(ck, name);
  fs.copyFileSync(path.join(ck, 'web.key'), path.join(keys, 'admins', 'web.key'));
  fs.copyFileSync(path.join(ck, 'ops.key'), path.join(keys, 'admins', 'ops.key'));
  fs.copyFileSync(path.join(ck, 'worker.key'), path.join(keys, 'workers', 'worker.key'));
  const brokerKey = path.join(keys, 'broker.key');
  env = { ...process.env, ONCEQ_BROKER: front, ONCEQ_KEY: path.join(ck, 'ops.key_secret'),
          ONCEQ_BROKER_KEY: brokerKey };

  start('broker', 'onceq-broker', ['--keys', keys, '--front', front, '--back', back,
    '--data-dir', path.join(dir, 'data'), '--heartbeat-ms', String(S_HEARTBEAT_MS),
    '--liveness', String(S_LIVENESS)]);
  await waitFor('the broker to answer a ping', () => onceq(['ping'], true).status === 0);

  const hash = execFileSync('openssl', ['passwd', '-6', PASSWORD], { encoding: 'utf8' }).trim();
  const users = path.join(dir, 'users');
  fs.writeFileSync(users, `alice admin ${hash}\nvic viewer ${hash}\n`, { mode: 0o600 });
  start('web', 'onceq-web', ['--users', users, '--broker', front, '--key',
    path.join(ck, 'web.key_secret'), '--broker-key', brokerKey, '--listen', '127.0.0.1:0']);
  const port = await waitFor('onceq-web to listen', () => {
    const m = /\(port (\d+)\)/.exec(fs.readFileSync(path.join(dir, 'web.log'), 'utf8'));
    return m && Number(m[1]);
  });
  const base = `http://127.0.0.1:${port}`;
  const workerArgs = (name, extra) => ['--broker', back, '--key', path.join(ck, 'worker.key_secret'),
    '--broker-key', brokerKey, '--name', name, ...extra];
  start('w1', 'onceq-test-worker', workerArgs('w1', ['--queue', 'default,mail']));

  const gate = path.join(dir, 'gate');
  fs.writeFileSync(gate, 'closed');
  const id = (r) => r.stdout.trim();
  const gateId = id(onceq(['dispatch', 'gate', '--payload', JSON.stringify({ file: gate, order: 42 }),
    '--max-tries', '1']));
  const reviewId = id(onceq(['dispatch', 'review', '--queue', 'mail', '--payload',
    JSON.stringify({ reason: 'carrier timed out: did SHP-7 ship?', order: 7 })]));
  for (let i = 0; i < 5; i++) onceq(['dispatch', 'noop', '--queue', i % 2 ? 'mail' : 'default']);
  await waitFor('a failed job, one in review and 5 done', () => {
    const s = stats();
    const q = (k) => (s.queues || []).reduce((a, x) => a + (x[k] || 0), 0);
    return q('failed') === 1 && q('review') === 1 && q('done') === 5;
  });

  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    userDataDir: fs.mkdtempSync(path.join(dir, 'chromium-')),
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    defaultViewport: { width: 1280, height: 800 },
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(S_WAIT_MS);

  /* no login: refused */
  /* A browser without credentials shows its login prompt on the 401
     (headless: an error), so the refusal is read over plain HTTP too. */
  const anon = await fetch(base + '/failed');
  if (anon.status !== 401 || !/^Basic /.test(anon.headers.get('www-authenticate') || ''))
    fail(`no login: HTTP ${anon.status}, wanted 401 with a Basic challenge`);
  const wrong = await fetch(base + '/', { headers: { Authorization: 'Basic ' +
    Buffer.from('alice:wrong').toString('base64') } });
  if (wrong.status !== 401) fail(`a wrong password: HTTP ${wrong.status}, wanted 401`);
  let r;
  await page.authenticate({ username: 'alice', password: PASSWORD });

  /* the overview: the counts of onceq stats --json */
  r = await page.goto(base + '/');
  if (r.status() !== 200) fail(`overview: HTTP ${r.status()}`);
  await page.waitForSelector('#queues');
  const shown = await page.$$eval('#queues tbody tr', (rows) => rows.map((tr) => {
    const o = {};
    for (const td of tr.querySelectorAll('td')) o[td.dataset.col] = td.textContent.trim();
    return o;
  }));
  const s = stats();
  for (const q of s.queues) {
    const row = shown.find((x) => x.name === q.name);
    if (!row) fail(`overview lacks queue ${q.name}`);
    for (const k of ['ready', 'delayed', 'leased', 'failed', 'review', 'done', 'duplicates'])
      if (String(q[k]) !== row[k]) fail(`overview: queue ${q.name} ${k} ${row[k]}, stats says ${q[k]}`);
  }
  if (shown.length !== s.queues.length) fail(`overview shows ${shown.length} queues, stats ${s.queues.length}`);
  await shot(page, 'overview');

  /* the failed page; CSRF; the viewer */
  await page.goto(base + '/failed');
  await page.waitForSelector(`#job-${gateId} button[data-op="retry"]`);
  await page.click(`#job-${gateId} details summary`);
  await shot(page, 'failed');
  const noToken = await page.evaluate(async (gid) => (await fetch('/action', { method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: `op=retry&id=${gid}` })).status, gateId);
  if (noToken !== 403) fail(`an action without its CSRF token: HTTP ${noToken}, wanted 403`);
  const ctx = await browser.createBrowserContext();
  const viewer = await ctx.newPage();
  await viewer.authenticate({ username: 'vic', password: PASSWORD });
  await viewer.goto(base + '/failed');
  await viewer.waitForSelector(`#job-${gateId}`);
  if ((await viewer.$$('button[data-op], form[method="post"]')).length !== 0)
    fail('a viewer sees action buttons');
  const viewerPost = await viewer.evaluate(async (gid) => (await fetch('/action', { method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: `op=retry&id=${gid}&csrf=x` })).status, gateId);
  if (viewerPost !== 403) fail(`a viewer's post: HTTP ${viewerPost}, wanted 403`);
  await ctx.close();

  /* retry by clicking: then it runs and is done */
  fs.unlinkSync(gate);
  await Promise.all([page.waitForNavigation(), page.click(`#job-${gateId} button[data-op="retry"]`)]);
  await page.waitForSelector('#done');
  const waited = onceq(['wait', gateId, '--timeout', '20'], true);
  if (waited.status !== 0) fail(`job ${gateId} after retry: ${waited.stdout}${waited.stderr}`);
  await page.goto(`${base}/job?id=${gateId}`);
  const state = await page.$eval('#f-state', (e) => e.textContent);
  if (state !== 'done') fail(`job page: ${gateId} is ${state}, wanted done`);
  await shot(page, 'job');

  /* resolve by clicking, with a note */
  await page.goto(base + '/review');
  await page.waitForSelector(`#job-${reviewId}`);
  await shot(page, 'review');
  await Promise.all([page.waitForNavigation(), page.click(`#job-${reviewId} a.act`)]);
  await page.waitForSelector('#resolve textarea');
  await page.type('#resolve textarea', 'SHP-7 is in the carrier portal: shipped');
  await shot(page, 'review-show');
  await Promise.all([page.waitForNavigation(), page.click('#resolve button[value="done"]')]);
  await page.waitForSelector('#done');
  const list = JSON.parse(onceq(['review', 'list', '--json']).stdout);
  if ((list.jobs || []).some((j) => String(j.id) === reviewId)) fail('onceq review list still has the job');
  if (!onceq(['review', 'show', reviewId]).stdout.includes('SHP-7 is in the carrier portal'))
    fail('the note is not on record');

  /* a worker killed mid-job leaves the workers page, by live update */
  const w2 = start('w2', 'onceq-test-worker', workerArgs('w2', ['--queue', 'slow']));
  onceq(['dispatch', 'sleep', '--queue', 'slow', '--payload', '{"ms":60000}']);
  await waitFor('w2 to hold the sleep job', () => (stats().workers || []).some((w) => w.name === 'w2' && w.leased === 1));
  const w2pid = (stats().workers || []).find((w) => w.name === 'w2').pid;
  await page.goto(base + '/workers');
  await page.waitForSelector(`tr[data-pid="${w2pid}"]`);
  await shot(page, 'workers');
  const killedAt = Date.now();
  process.kill(w2pid, 'SIGKILL');
  if (w2pid !== w2.pid) w2.kill('SIGKILL');
  await page.waitForFunction((pid) => !document.querySelector(`tr[data-pid="${pid}"]`), { timeout: S_WAIT_MS }, w2pid);
  console.log(`the killed worker left the workers page after ${Date.now() - killedAt} ms (liveness window ${S_HEARTBEAT_MS * S_LIVENESS} ms, page period 5000 ms)`);

  /* bad input */
  r = await page.goto(`${base}/job?id=999999999`);
  if (r.status() !== 404 || !(await page.$('#error'))) fail(`unknown id: HTTP ${r.status()}`);
  await shot(page, 'error');
  r = await page.goto(`${base}/job?id=nope`);
  if (r.status() !== 400) fail(`bad id: HTTP ${r.status()}`);
  r = await page.goto(`${base}/failed?q=${'a'.repeat(100000)}`);
  if (r.status() !== 414) fail(`huge query string: HTTP ${r.status()}, wanted 414`);
  await page.goto(base + '/failed');
  const malformed = await page.evaluate(async () => {
    const csrf = document.querySelector('input[name="csrf"]');
    const r = await fetch('/action', { method: 'POST', headers: { 'Content-Type': 'multipart/form-data' },
      body: `csrf=${csrf ? csrf.value : ''}&op=%%%&id=\u0000` });
    return { status: r.status, text: await r.text() };
  });
  if (malformed.status !== 400 || !malformed.text.includes('malformed form'))
    fail(`malformed form: HTTP ${malformed.status}`);
  for (const p of procs.slice(0, 3))
    if (p.exitCode !== null || p.signalCode !== null) fail(`${p.spawnargs[0]} exited`);
  if (onceq(['ping'], true).status !== 0) fail('the broker does not answer after the bad input');
  r = await page.goto(base + '/');
  if (r.status() !== 200) fail(`onceq-web after the bad input: HTTP ${r.status()}`);
}

main().then(async () => {
  await browser.close();
  clearTimeout(overall);
  cleanup();
  fs.rmSync(dir, { recursive: true, force: true });
  console.log('1 passed, 0 failed');
}, async (e) => {
  console.error(`web.browser: FAILED: ${e.message}; logs in ${dir}`);
  for (const f of ['web.log', 'broker.log']) {
    try { console.error(`--- ${f}\n` + fs.readFileSync(path.join(dir, f), 'utf8').slice(-3000)); } catch (_) { }
  }
  try { if (browser) await browser.close(); } catch (_) { }
  cleanup();
  process.exit(1);
});
