// Documents: the list (search, category), uploads with per-file progress and warnings, one document's page (its
// history in history.js).
import {api, upload} from './api.js';
import {badge, encodePath, fmtBytes, fmtDate, h, replace, table} from './dom.js';
import {historySection} from './history.js';
import {t} from './i18n.js';
import {sourcesSection} from './sources.js';
import {errorBox, field, loading, notice, select} from './ui.js';

const LIMIT = 50;
const state = {q: '', category: '', offset: 0, uploads: [], uploadCategory: '', notice: null};

export function render(root, path) {
  return path ? renderDocument(root, path) : renderList(root);
}

// -- the list -----------------------------------------------------------------------------------

async function renderList(root) {
  const listBox = h('div', {id: 'doc-list', 'aria-live': 'polite'}, loading());
  const query = h('input', {type: 'search', value: state.q, name: 'q'});
  const category = select([['', t('docs.allCategories')]], state.category);
  category.name = 'category';
  const form = h('form', {class: 'filters', role: 'search', onsubmit: (event) => {
    event.preventDefault();
    state.q = query.value.trim();
    state.category = category.value;
    state.offset = 0;
    loadList(listBox);
  }},
  field('doc-q', t('docs.search'), query, t('docs.searchHelp')),
  field('doc-category', t('docs.category'), category),
  h('div', {class: 'field field-button'}, h('button', {type: 'submit'}, t('docs.filter'))));
  category.addEventListener('change', () => form.requestSubmit());

  replace(root,
    h('h1', {}, t('docs.title')),
    state.notice ? notice(state.notice) : null,
    uploadSection(listBox),
    sourcesSection(() => loadList(listBox)),
    h('section', {'aria-labelledby': 'docs-list-h'}, h('h2', {id: 'docs-list-h'}, t('docs.list')), form, listBox));
  state.notice = null;
  loadCategories(category, listBox);
  await loadList(listBox);
}

async function loadCategories(selectEl, listBox) {
  try {
    const {categories} = await api('GET', '/api/categories');
    for (const c of categories) {
      selectEl.append(h('option', {value: c.name, selected: c.name === state.category}, `${c.name} (${c.documents})`));
    }
  } catch (err) {
    listBox.before(errorBox(err, t('docs.categoriesFailed')));
  }
}

async function loadList(box) {
  replace(box, loading());
  let page;
  try {
    page = await api('GET', '/api/documents', {query: {q: state.q, category: state.category, limit: LIMIT,
      offset: state.offset}});
  } catch (err) {
    replace(box, errorBox(err, t('docs.listFailed')));
    return;
  }
  const rows = page.documents.map((d) => [
    h('a', {href: `#/documents/${encodePath(d.path)}`}, d.path),
    d.title, d.category, String(d.chunk_count),
    d.warnings.length ? h('span', {class: 'warn-count', title: d.warnings.join('\n')}, `⚠ ${d.warnings.length}`) : '',
    fmtDate(d.updated_at)]);
  const end = Math.min(page.offset + page.documents.length, page.total);
  const pager = h('div', {class: 'pager'},
    h('span', {role: 'status'}, t('docs.total', {from: page.total ? page.offset + 1 : 0, to: end, total: page.total})),
    h('button', {type: 'button', disabled: page.offset === 0, onclick: () => {
      state.offset = Math.max(0, state.offset - LIMIT);
      loadList(box);
    }}, t('docs.prev')),
    h('button', {type: 'button', disabled: end >= page.total, onclick: () => {
      state.offset += LIMIT;
      loadList(box);
    }}, t('docs.next')));
  replace(box, rows.length ? table([t('docs.path'), t('docs.docTitle'), t('docs.category'), t('docs.chunks'),
    t('docs.warnings'), t('docs.updated')], rows, {id: 'doc-table'}) : h('p', {class: 'muted'}, t('docs.none')), pager);
}

// -- uploads ------------------------------------------------------------------------------------

function uploadSection(listBox) {
  const input = h('input', {type: 'file', multiple: true, accept: '.md,.markdown,text/markdown'});
  const category = h('input', {type: 'text', value: state.uploadCategory, placeholder: t('upload.categoryPlaceholder')});
  const rows = h('tbody', {id: 'upload-rows'});
  const start = (files) => {
    if (!files.length) return;
    state.uploadCategory = category.value.trim();
    startUploads([...files], state.uploadCategory, rows, listBox);
    input.value = '';
  };
  input.addEventListener('change', () => start(input.files));
  const zone = h('section', {class: 'dropzone', id: 'dropzone', 'aria-labelledby': 'upload-h'},
    h('h2', {id: 'upload-h'}, t('upload.title')),
    h('p', {class: 'muted'}, t('upload.help')),
    h('div', {class: 'row'},
      field('upload-files', t('upload.files'), input),
      field('upload-category', t('upload.category'), category, t('upload.categoryHelp'))),
    h('div', {class: 'table-wrap'}, h('table', {class: 'uploads'},
      h('caption', {class: 'sr-only'}, t('upload.progress')),
      h('thead', {}, h('tr', {}, [t('upload.file'), t('upload.size'), t('upload.progress'), t('upload.status'),
        t('upload.result')].map((x) => h('th', {scope: 'col'}, x)))),
      rows)));
  for (const item of state.uploads) rows.append(uploadRow(item));
  zone.addEventListener('dragover', (event) => {
    event.preventDefault();
    zone.classList.add('dragging');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('dragging'));
  zone.addEventListener('drop', (event) => {
    event.preventDefault();
    zone.classList.remove('dragging');
    start(event.dataTransfer.files);
  });
  return zone;
}

async function startUploads(files, category, rows, listBox) {
  const items = files.map((file) => ({file, name: file.name, size: file.size, progress: 0, status: 'queued'}));
  state.uploads = [...items, ...state.uploads].slice(0, 100);
  for (const item of [...items].reverse()) {
    item.row = uploadRow(item);
    rows.prepend(item.row);
  }
  const queue = [...items];
  const worker = async () => {
    while (queue.length) await uploadOne(queue.shift(), category);
  };
  await Promise.all([worker(), worker()]);  // two at a time; each its own request, so each its own progress
  if (listBox.isConnected) loadList(listBox);
}

async function uploadOne(item, category) {
  const form = new FormData();
  form.append('files', item.file, item.name);
  if (category) form.append('category', category);
  item.status = 'uploading';
  redraw(item);
  try {
    const body = await upload('POST', '/api/documents', form, (loaded, total) => {
      item.progress = Math.round((100 * loaded) / total);
      redraw(item);
    });
    item.report = body.documents[0];
    item.status = item.report.status;
  } catch (err) {
    item.error = err;
    item.status = 'failed';
  }
  item.progress = item.error && item.error.status === 0 ? item.progress : 100;
  delete item.file;
  redraw(item);
}

function redraw(item) {
  const row = uploadRow(item);
  if (item.row && item.row.isConnected) item.row.replaceWith(row);
  item.row = row;
}

function uploadRow(item) {
  const report = item.report;
  let result = '';
  if (item.error) {
    result = errorBox(item.error, item.name);
  } else if (report) {
    result = h('div', {},
      report.path ? h('a', {href: `#/documents/${encodePath(report.path)}`}, report.path) : null,
      report.path ? ` · ${t('upload.chunks', {n: report.chunks})}` : null,
      report.reason && report.status !== 'failed' ? h('div', {class: 'muted'}, report.reason) : null,
      report.status === 'failed' ? h('div', {class: 'error', role: 'alert'}, h('code', {}, report.error_code || 'failed'),
        ' — ', report.reason || '') : null,
      report.warnings.length ? h('ul', {class: 'warnings', 'aria-label': t('docs.warnings')},
        report.warnings.map((w) => h('li', {}, `⚠ ${w}`))) : null);
  }
  return h('tr', {class: `upload upload-${item.status}`, 'data-name': item.name},
    h('td', {}, item.name), h('td', {}, fmtBytes(item.size)),
    h('td', {}, h('progress', {max: '100', value: String(item.progress), 'aria-label': t('upload.progressOf',
      {name: item.name})}), ` ${item.progress}%`),
    h('td', {}, badge(item.status, '', {queued: t('upload.queued'), uploading: t('upload.uploading')}[item.status])),
    h('td', {}, result));
}

// -- one document -------------------------------------------------------------------------------

async function renderDocument(root, path) {
  replace(root, h('p', {}, h('a', {href: '#/documents'}, `← ${t('docs.back')}`)), h('h1', {}, path), loading());
  let doc;
  try {
    doc = await api('GET', `/api/documents/${encodePath(path)}`);
  } catch (err) {
    replace(root, h('p', {}, h('a', {href: '#/documents'}, `← ${t('docs.back')}`)), h('h1', {}, path),
      errorBox(err, t('doc.loadFailed')));
    return;
  }
  const actions = h('section', {class: 'actions', 'aria-labelledby': 'doc-actions-h'},
    h('h2', {id: 'doc-actions-h'}, t('doc.actions')), replaceForm(root, doc), deleteControl(doc));
  replace(root,
    h('p', {}, h('a', {href: '#/documents'}, `← ${t('docs.back')}`)),
    h('h1', {}, doc.title),
    h('p', {class: 'muted'}, h('code', {}, doc.path)),
    state.notice ? notice(state.notice) : null,
    doc.warnings.length ? h('div', {class: 'warning-box', role: 'note'}, h('strong', {}, t('docs.warnings')),
      h('ul', {class: 'warnings'}, doc.warnings.map((w) => h('li', {}, w)))) : null,
    h('div', {class: 'columns'},
      h('section', {'aria-labelledby': 'doc-meta-h'}, h('h2', {id: 'doc-meta-h'}, t('doc.metadata')), metadata(doc)),
      h('section', {'aria-labelledby': 'doc-fm-h'}, h('h2', {id: 'doc-fm-h'}, t('doc.frontmatter')), frontmatter(doc))),
    h('section', {'aria-labelledby': 'doc-chunks-h'},
      h('h2', {id: 'doc-chunks-h'}, t('doc.chunks', {n: doc.chunks.length})),
      h('p', {class: 'muted'}, t('doc.chunksHelp')),
      h('div', {class: 'tree', id: 'chunk-tree'}, chunkTree(doc.chunks))),
    historySection(doc, (message) => {
      state.notice = message;
      renderDocument(root, doc.path);
    }),
    actions);
  state.notice = null;
}

function metadata(doc) {
  const rows = [
    [t('doc.path'), h('code', {}, doc.path)], [t('doc.id'), h('code', {}, doc.id)], [t('docs.category'), doc.category],
    [t('docs.docTitle'), `${doc.title} (${doc.title_source})`], [t('doc.summary'), `${doc.summary} (${doc.summary_source})`],
    [t('doc.keywords'), doc.keywords.length ? doc.keywords.map((k) => h('span', {class: 'chip'}, k)) : '–'],
    [t('doc.size'), fmtBytes(doc.size_bytes)], [t('docs.chunks'), String(doc.chunk_count)],
    [t('doc.hash'), h('code', {}, doc.content_hash.slice(0, 16))], [t('doc.origin'), doc.origin || '–'],
    [t('doc.created'), fmtDate(doc.created_at)], [t('docs.updated'), fmtDate(doc.updated_at)]];
  return h('dl', {class: 'meta'}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

function frontmatter(doc) {
  const entries = Object.entries(doc.frontmatter || {});
  if (!entries.length) return h('p', {class: 'muted'}, t('doc.noFrontmatter'));
  return h('dl', {class: 'meta', id: 'frontmatter'}, entries.map(([k, v]) => [h('dt', {}, h('code', {}, k)),
    h('dd', {}, typeof v === 'string' ? v : h('code', {}, JSON.stringify(v)))]));
}

/** Chunks as a tree of their heading paths (the breadcrumbs), in document order. */
export function chunkTree(chunks) {
  const root = {children: new Map(), chunks: []};
  for (const chunk of chunks) {
    let node = root;
    for (const heading of chunk.heading_path) {
      if (!node.children.has(heading)) node.children.set(heading, {children: new Map(), chunks: []});
      node = node.children.get(heading);
    }
    node.chunks.push(chunk);
  }
  return renderNode(root);
}

function renderNode(node) {
  const items = [];
  for (const chunk of node.chunks) items.push(h('li', {class: 'chunk'}, chunkDetails(chunk)));
  for (const [heading, child] of node.children) {
    items.push(h('li', {class: 'heading'}, h('span', {class: 'heading-name'}, heading), renderNode(child)));
  }
  return h('ul', {}, items);
}

function chunkDetails(chunk) {
  return h('details', {'data-chunk-id': chunk.id},
    h('summary', {}, t('doc.chunkLine', {n: chunk.index + 1, total: chunk.total, from: chunk.line_start,
      to: chunk.line_end, chars: chunk.text.length}), chunk.anchor ? [' · ', h('code', {}, `#${chunk.anchor}`)] : null),
    h('p', {class: 'crumb'}, chunk.breadcrumb || t('doc.preamble')),
    h('pre', {class: 'chunk-text'}, chunk.text));
}

function replaceForm(root, doc) {
  const input = h('input', {type: 'file', accept: '.md,.markdown,text/markdown'});
  const button = h('button', {type: 'submit', disabled: true}, t('doc.replace'));
  const progress = h('progress', {max: '100', value: '0', hidden: true, 'aria-label': t('doc.replaceProgress')});
  const out = h('div', {'aria-live': 'polite'});
  input.addEventListener('change', () => { button.disabled = !input.files.length; });
  return h('form', {class: 'inline-form', onsubmit: async (event) => {
    event.preventDefault();
    if (!input.files.length) return;
    const form = new FormData();
    form.append('file', input.files[0], input.files[0].name);
    button.disabled = true;
    progress.hidden = false;
    try {
      const report = await upload('PUT', `/api/documents/${encodePath(doc.path)}`, form, (loaded, total) => {
        progress.value = Math.round((100 * loaded) / total);
      });
      state.notice = t('doc.replaced', {status: report.status, n: report.chunks}) +
        (report.warnings.length ? ` · ⚠ ${report.warnings.join(' · ')}` : '');
      renderDocument(root, doc.path);
    } catch (err) {
      replace(out, errorBox(err, t('doc.replaceFailed')));
      button.disabled = false;
    }
  }}, field('replace-file', t('doc.replaceWith'), input), h('div', {class: 'field field-button'}, button), progress, out);
}

function deleteControl(doc) {
  const out = h('div', {'aria-live': 'polite'});
  const start = h('button', {type: 'button', class: 'danger', id: 'delete-start'}, t('doc.delete'));
  const confirmBox = h('div', {class: 'confirm', hidden: true, role: 'group', 'aria-labelledby': 'delete-q'},
    h('p', {id: 'delete-q'}, t('doc.deleteConfirm', {path: doc.path})));
  const yes = h('button', {type: 'button', class: 'danger', id: 'delete-confirm'}, t('doc.deleteYes'));
  const no = h('button', {type: 'button'}, t('doc.cancel'));
  confirmBox.append(yes, ' ', no);
  start.addEventListener('click', () => {
    confirmBox.hidden = false;
    start.hidden = true;
    yes.focus();
  });
  no.addEventListener('click', () => {
    confirmBox.hidden = true;
    start.hidden = false;
    start.focus();
  });
  yes.addEventListener('click', async () => {
    yes.disabled = true;
    try {
      await api('DELETE', `/api/documents/${encodePath(doc.path)}`);
      state.notice = t('doc.deleted', {path: doc.path});
      location.hash = '#/documents';
    } catch (err) {
      replace(out, errorBox(err, t('doc.deleteFailed')));
      yes.disabled = false;
    }
  });
  return h('div', {class: 'delete'}, start, confirmBox, out);
}
