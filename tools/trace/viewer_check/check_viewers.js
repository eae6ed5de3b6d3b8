// Loads Chrome trace files into the two viewers Kolo promises (speedscope and Chromium's DevTools
// Performance panel) in headless Chromium, and reports what each said. Run through
// scripts/check-trace-viewers.sh, which installs and serves what this needs.
//
//   node check_viewers.js <http base of speedscope> <devtools port> <out dir> <trace>...
//
// Exit status 1 when speedscope warned about a trace (unmatched or mis-nested spans: what it
// prints when the nesting of a row is wrong) or either viewer threw; screenshots of both go to
// <out dir> for a look.
const { chromium } = require('playwright-core');
const path = require('path');

const [base, devtoolsPort, outDir, ...traces] = process.argv.slice(2);
const chromiumArgs = ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
                      '--disable-component-update', '--disable-sync', '--no-first-run'];

function collect(page) {
  const messages = [];
  page.on('console', m => messages.push({ type: m.type(), text: m.text() }));
  page.on('pageerror', e => messages.push({ type: 'pageerror', text: e.message }));
  return messages;
}

async function speedscope(browser, trace) {
  const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
  const messages = collect(page);
  const file = path.basename(trace);
  await page.goto(`${base}/index.html#profileURL=${base}/traces/${file}`);
  // speedscope times its import with console.time: its end says the profile is in.
  for (let waited = 0; !messages.some(m => m.text.startsWith('import:')); waited += 100) {
    if (waited > 60000) throw new Error('speedscope did not finish importing within 60 s');
    await page.waitForTimeout(100);
  }
  await page.waitForTimeout(500);
  await page.screenshot({ path: `${outDir}/speedscope-${file}.png` });
  await page.close();
  // speedscope's own GL driver chatter is not about the trace.
  return messages.filter(m => (m.type === 'warning' && !m.text.includes('GL Driver')) ||
                              m.type === 'pageerror');
}

async function devtools(browser, trace) {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const messages = collect(page);
  await page.goto(`http://localhost:${devtoolsPort}/devtools/devtools_app.html?panel=timeline`);
  const [chooser] = await Promise.all([
    page.waitForEvent('filechooser', { timeout: 30000 }),
    page.locator('[aria-label^="Load"]').first().click(),
  ]);
  await chooser.setFiles(trace);
  await page.waitForTimeout(8000);
  await page.keyboard.press('Escape');
  await page.screenshot({ path: `${outDir}/devtools-${path.basename(trace)}.png` });
  await page.close();
  return messages.filter(m => m.type === 'pageerror');
}

(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: chromiumArgs });
  let failed = false;
  for (const trace of traces) {
    for (const [viewer, run] of [['speedscope', speedscope], ['devtools', devtools]]) {
      let problems;
      try {
        problems = await run(browser, trace);
      } catch (e) {
        problems = [{ type: 'error', text: e.message }];
      }
      failed ||= problems.length > 0;
      console.log(`${viewer}: ${path.basename(trace)}: ` +
                  (problems.length ? `${problems.length} problem(s)` : 'loaded, no warnings'));
      for (const p of problems) console.log(`  ${p.type}: ${p.text.slice(0, 400)}`);
    }
  }
  await browser.close();
  process.exit(failed ? 1 : 0);
})();
