// UI strings in Chinese and English (strings.json); the choice is kept in localStorage.

const LANG = 'kbseek.lang';
const response = await fetch(new URL('strings.json', import.meta.url));
export const STRINGS = await response.json();
export const LANGS = Object.keys(STRINGS);

let current = localStorage.getItem(LANG);
if (!LANGS.includes(current)) current = (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en';

export function lang() {
  return current;
}

export function setLang(value) {
  current = LANGS.includes(value) ? value : 'en';
  localStorage.setItem(LANG, current);
  document.documentElement.lang = current === 'zh' ? 'zh-CN' : 'en';
}

/** t('docs.total', {n: 3}) -> the string in the current language, {names} filled in. */
export function t(key, vars = {}) {
  const text = STRINGS[current][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in vars ? String(vars[name]) : whole));
}

/** The static page's strings: data-i18n (text), data-i18n-placeholder, -title, -aria-label. */
export function translatePage(root = document) {
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll('[data-i18n-placeholder]')) el.placeholder = t(el.dataset.i18nPlaceholder);
  for (const el of root.querySelectorAll('[data-i18n-title]')) el.title = t(el.dataset.i18nTitle);
  for (const el of root.querySelectorAll('[data-i18n-aria-label]')) {
    el.setAttribute('aria-label', t(el.dataset.i18nAriaLabel));
  }
  document.title = t('title');
}

setLang(current);
