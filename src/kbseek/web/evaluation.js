// Evaluation: the golden cases, a run of them against this server, and the reports with their charts.
import {api, blobUrl} from './api.js';
import {fmtDate, fmtNum, h, replace, table} from './dom.js';
import {t} from './i18n.js';
import {renderMarkdown} from './markdown.js';
import {errorBox, field, loading, notice, select} from './ui.js';

const POLICIES = ['hybrid', 'answer:hybrid', 'lexical', 'dense', 'legacy'];
const HEADLINE = ['ndcg@10', 'recall@10', 'mrr@10', 'hit@1'];
const state = {selected: null, lastRun: null, policies: ['hybrid', 'answer:hybrid'], split: '', save: true};

export async function render(root) {
  const cases = h('section', {'aria-labelledby': 'cases-h'}, h('h2', {id: 'cases-h'}, t('eval.cases')), loading());
  const reports = h('section', {'aria-labelledby': 'reports-h', id: 'reports'},
    h('h2', {id: 'reports-h'}, t('eval.reports')), loading());
  replace(root, h('h1', {}, t('eval.title')), cases, runSection(reports), reports);
  await Promise.all([loadCases(cases), loadReports(reports)]);
}

async function loadCases(section) {
  const heading = section.querySelector('h2');
  let data;
  try {
    data = await api('GET', '/api/eval/cases');
  } catch (err) {
    replace(section, heading, errorBox(err, t('eval.casesFailed')));
    return;
  }
  if (!data.exists) {
    replace(section, heading, h('p', {class: 'muted'}, t('eval.noCases', {file: data.file})));
    return;
  }
  const rows = data.cases.map((c) => [h('code', {}, c.id), c.query,
    c.answerable ? c.expected.map((e) => h('div', {}, `${e.document}${e.heading_path.length ? ' › ' +
      e.heading_path.join(' › ') : ''} (${e.grade})`)) : h('em', {}, t('eval.noAnswer')),
    c.split, c.tags.join(', ')]);
  replace(section, heading, h('p', {}, t('eval.casesCount', {file: data.file, n: data.count})),
    h('details', {}, h('summary', {}, t('eval.showCases')),
      table([t('eval.caseId'), t('sessions.query'), t('eval.expected'), t('case.split'), t('case.tags')], rows)));
}

function runSection(reports) {
  const out = h('div', {id: 'run-result', 'aria-live': 'polite'});
  if (state.lastRun) out.append(runView(state.lastRun));
  const boxes = POLICIES.map((p) => h('span', {class: 'tag-choice'}, h('input', {type: 'checkbox', id: `run-${p}`,
    value: p, checked: state.policies.includes(p)}), h('label', {for: `run-${p}`}, p)));
  const split = select([['', t('eval.allSplits')], ['dev', 'dev'], ['test', 'test']], state.split);
  const save = h('input', {type: 'checkbox', id: 'run-save', checked: state.save});
  const button = h('button', {type: 'submit', id: 'run-cases'}, t('eval.run'));
  return h('section', {'aria-labelledby': 'run-h'}, h('h2', {id: 'run-h'}, t('eval.runTitle')),
    h('p', {class: 'muted'}, t('eval.runHelp')),
    h('form', {onsubmit: async (event) => {
      event.preventDefault();
      state.policies = POLICIES.filter((p) => document.getElementById(`run-${p}`).checked);
      state.split = split.value;
      state.save = save.checked;
      button.disabled = true;
      const started = Date.now();
      const ticker = h('p', {class: 'muted loading', role: 'status'}, t('eval.running', {s: 0}));
      const timer = setInterval(() => {
        ticker.textContent = t('eval.running', {s: Math.round((Date.now() - started) / 1000)});
      }, 1000);
      replace(out, ticker);
      try {
        state.lastRun = await api('POST', '/api/eval/runs', {json: {policies: state.policies,
          split: state.split || null, save: state.save}});
        replace(out, runView(state.lastRun));
        if (state.lastRun.report) state.selected = state.lastRun.report.name;
        loadReports(reports);
      } catch (err) {
        replace(out, errorBox(err, t('eval.runFailed')));
      } finally {
        clearInterval(timer);
        button.disabled = false;
      }
    }},
    h('fieldset', {}, h('legend', {}, t('eval.policies')), boxes),
    h('div', {class: 'row'}, field('run-split', t('case.split'), split),
      h('div', {class: 'field field-check'}, save, h('label', {for: 'run-save'}, t('eval.save')))),
    h('div', {class: 'field-button'}, button)), out);
}

function runView(run) {
  const metrics = HEADLINE.filter((m) => m in run.runs[0].metrics);
  return h('div', {id: 'run-summary'},
    notice(t('eval.ran', {n: run.config.queries, u: run.unanswerable, s: fmtNum(run.seconds, 1)}) +
      (run.report ? ` · ${t('eval.savedAs', {name: run.report.name})}` : '')),
    table([t('eval.runName'), ...metrics, t('eval.answerableRefused'), t('eval.unanswerableRefused')],
      run.runs.map((r) => [r.name, ...metrics.map((m) => fmtNum(r.metrics[m])),
        `${Math.round(100 * (r.no_answer.answerable_refused || 0))}%`,
        'unanswerable' in r.no_answer ? `${Math.round(100 * r.no_answer.unanswerable_refused)}%` : '–']),
      {id: 'run-table'}));
}

async function loadReports(section) {
  const heading = section.querySelector('h2');
  let reports;
  try {
    reports = (await api('GET', '/api/eval/reports')).reports;
  } catch (err) {
    replace(section, heading, errorBox(err, t('eval.reportsFailed')));
    return;
  }
  if (!reports.length) {
    replace(section, heading, h('p', {class: 'muted'}, t('eval.noReports')));
    return;
  }
  if (!reports.some((r) => r.name === state.selected)) state.selected = reports[0].name;
  const view = h('article', {class: 'report', id: 'report-view', 'aria-live': 'polite'});
  const buttons = reports.map((r) => h('li', {}, h('button', {type: 'button', class: 'report-choice',
    'aria-pressed': String(r.name === state.selected), 'data-report': r.name, onclick: (event) => {
      state.selected = r.name;
      for (const b of section.querySelectorAll('.report-choice')) b.setAttribute('aria-pressed', 'false');
      event.currentTarget.setAttribute('aria-pressed', 'true');
      showReport(view, r);
    }}, h('strong', {}, r.title), h('span', {class: 'muted'}, ` ${r.name}.md · ${fmtDate(r.modified)}`))));
  replace(section, heading, h('div', {class: 'reports-layout'},
    h('nav', {'aria-label': t('eval.reportList')}, h('ul', {class: 'plain report-list'}, buttons)), view));
  await showReport(view, reports.find((r) => r.name === state.selected));
}

async function showReport(view, report) {
  replace(view, loading());
  let text;
  try {
    text = await api('GET', `/api/eval/reports/${encodeURIComponent(report.name)}`);
  } catch (err) {
    replace(view, errorBox(err, t('eval.reportFailed')));
    return;
  }
  const image = (src, alt) => {
    const figure = h('figure', {class: 'chart'});
    const file = src.split('/').pop();
    blobUrl(`/api/eval/reports/${encodeURIComponent(report.name)}/charts/${encodeURIComponent(file)}`)
      .then((url) => figure.append(h('img', {src: url, alt, 'data-chart': file}), h('figcaption', {}, alt)))
      .catch((err) => figure.append(errorBox(err, t('eval.chartFailed', {file}))));
    return figure;
  };
  replace(view, renderMarkdown(text, image));
}
