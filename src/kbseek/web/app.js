// The console's shell: hash routes, the key field, the language toggle, readiness.
import {api, getKey, setKey} from './api.js';
import {clear, decodePath, h, replace} from './dom.js';
import {lang, setLang, t, translatePage} from './i18n.js';
import * as documents from './documents.js';
import * as evaluation from './evaluation.js';
import * as lookup from './lookup.js';
import * as sessions from './sessions.js';

const main = document.getElementById('main');
const PAGES = {documents, lookup, sessions, eval: evaluation};
let lastRoute = '';
let readyTimer = null;

/** '#/documents/api/x.md' -> {page: 'documents', rest: 'api/x.md'} */
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  return {page: PAGES[page] ? page : 'documents', rest: rest.length ? decodePath(rest.join('/')) : ''};
}

async function show({focus = true} = {}) {
  const {page, rest} = route();
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === page) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  clear(main);
  main.dataset.page = page;
  try {
    await PAGES[page].render(main, rest);
  } catch (err) {
    replace(main, h('div', {class: 'error', role: 'alert'}, `${t('error.title')}: ${err && err.stack || err}`));
  }
  // a new page: move focus to its heading, so keyboard and screen-reader users start there
  const key = `${page}/${rest}`;
  if (focus && key !== lastRoute) {
    const heading = main.querySelector('h1');
    if (heading) {
      heading.tabIndex = -1;
      heading.focus({preventScroll: false});
    }
  }
  lastRoute = key;
}

function showKeyState() {
  const state = document.getElementById('key-state');
  state.textContent = getKey() ? t('key.set') : t('key.none');
}

async function showReady() {
  const el = document.getElementById('ready');
  try {
    const ready = await api('GET', '/ready');
    const indexes = ready.checks.indexes;
    el.textContent = `● ${t('ready.yes')}`;
    el.title = t('ready.title', {n: indexes.documents, chunks: indexes.chunks, version: indexes.version});
    el.className = 'ready ready-yes';
  } catch (err) {
    el.textContent = `● ${t('ready.no', {reason: err.code})}`;
    el.title = err.message;
    el.className = 'ready ready-no';
    clearTimeout(readyTimer);
    readyTimer = setTimeout(showReady, 2000);
  }
}

function applyLanguage() {
  translatePage();
  const button = document.getElementById('lang');
  button.textContent = lang() === 'zh' ? 'English' : '中文';
  button.lang = lang() === 'zh' ? 'en' : 'zh-CN';
  showKeyState();
}

document.getElementById('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = document.getElementById('api-key');
  setKey(input.value.trim());
  input.value = '';
  showKeyState();
  show({focus: false});
});

document.getElementById('key-clear').addEventListener('click', () => {
  setKey('');
  document.getElementById('api-key').value = '';
  showKeyState();
  show({focus: false});
});

document.getElementById('lang').addEventListener('click', () => {
  setLang(lang() === 'zh' ? 'en' : 'zh');
  applyLanguage();
  showReady();
  show({focus: false});
});

document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();  // the hash is the router's: focus the content instead of navigating
  main.focus();
});

window.addEventListener('hashchange', () => {
  showReady();
  show();
});
applyLanguage();
showReady();
show({focus: false});
