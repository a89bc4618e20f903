// /docs: Swagger UI from the package's own files (no CDN), under the console's Content-Security-Policy.
// Its requests carry X-Kbseek-Client like the console's; "Authorize" sends a key as Authorization: Bearer.
window.addEventListener('load', () => {
  window.ui = window.SwaggerUIBundle({
    url: 'openapi.json',
    dom_id: '#swagger-ui',
    deepLinking: true,
    requestInterceptor: (request) => {
      request.headers['X-Kbseek-Client'] = 'docs';
      return request;
    },
  });
});
