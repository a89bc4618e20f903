// The console's only way to the server: the public REST API, with the key the user pasted (sessionStorage).

const KEY = 'kbseek.apiKey';

export class ApiError extends Error {
  constructor(status, code, message, hint = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.hint = hint;
  }
}

export function getKey() {
  return sessionStorage.getItem(KEY) || '';
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

// Every request says it comes from the console: a page on another site cannot send this header without the
// server's consent (a CORS preflight it refuses), so the server can tell the console from a forged form post.
function authHeaders(extra = {}) {
  const key = getKey();
  const headers = {...extra, 'X-Kbseek-Client': 'console'};
  return key ? {...headers, Authorization: `Bearer ${key}`} : headers;
}

function url(path, query) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/** An error response as an ApiError: the API's {"error": {code, message, hint}}, else the status line. */
function errorOf(status, statusText, contentType, body) {
  if (contentType.includes('json')) {
    try {
      const error = JSON.parse(body).error;
      if (error && error.code) return new ApiError(status, error.code, error.message || statusText, error.hint);
    } catch (_) { /* not JSON after all: shown as text below */ }
  }
  return new ApiError(status, `http_${status}`, (body || statusText || 'request failed').slice(0, 500));
}

/** api('GET', '/api/documents', {query: {q: 'jvm'}}) -> parsed JSON (or text); throws ApiError. */
export async function api(method, path, {query, json} = {}) {
  const init = {method, headers: authHeaders(json === undefined ? {} : {'Content-Type': 'application/json'})};
  if (json !== undefined) init.body = JSON.stringify(json);
  let response;
  try {
    response = await fetch(url(path, query), init);
  } catch (err) {
    throw new ApiError(0, 'network_error', String(err && err.message || err));
  }
  const type = response.headers.get('content-type') || '';
  const body = await response.text();
  if (!response.ok) throw errorOf(response.status, response.statusText, type, body);
  if (type.includes('json')) return JSON.parse(body);
  return body;
}

/** An image (a report chart) through the API with the key, as an object URL for <img src>. */
export async function blobUrl(path) {
  let response;
  try {
    response = await fetch(path, {headers: authHeaders()});
  } catch (err) {
    throw new ApiError(0, 'network_error', String(err && err.message || err));
  }
  if (!response.ok) {
    throw errorOf(response.status, response.statusText, response.headers.get('content-type') || '',
      await response.text());
  }
  return URL.createObjectURL(await response.blob());
}

/** A multipart upload with XMLHttpRequest, for its upload progress: onProgress(loaded, total). */
export function upload(method, path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, path);
    for (const [name, value] of Object.entries(authHeaders())) xhr.setRequestHeader(name, value);
    xhr.upload.addEventListener('progress', (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.addEventListener('load', () => {
      const type = xhr.getResponseHeader('content-type') || '';
      if (xhr.status >= 200 && xhr.status < 300) {
        try {
          resolve(type.includes('json') ? JSON.parse(xhr.responseText) : xhr.responseText);
        } catch (err) {
          reject(new ApiError(xhr.status, 'invalid_response', String(err)));
        }
      } else {
        reject(errorOf(xhr.status, xhr.statusText, type, xhr.responseText));
      }
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, 'network_error', 'the upload did not reach the server')));
    xhr.addEventListener('abort', () => reject(new ApiError(0, 'aborted', 'the upload was cancelled')));
    xhr.send(form);
  });
}
