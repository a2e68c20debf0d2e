// A function that cleans up on SIGTERM. Lambda sends the runtime SIGTERM at shutdown only when
// an extension is registered, so, as AWS's graceful-shutdown samples do, it registers an
// internal extension for no events (unless REGISTER_EXTENSION=0), which waits on `next` until
// the environment ends. IGNORE_SIGTERM=1 makes it ignore the signal.
if (process.env.REGISTER_EXTENSION !== '0') {
  const api = `http://${process.env.AWS_LAMBDA_RUNTIME_API}/2020-01-01/extension`;
  const registered = await fetch(`${api}/register`, {
    method: 'POST',
    headers: { 'Lambda-Extension-Name': 'graceful-shutdown' },
    body: JSON.stringify({ events: [] }),
  });
  const id = registered.headers.get('lambda-extension-identifier');
  // Answered by nothing: it ends with the environment.
  fetch(`${api}/event/next`, { headers: { 'Lambda-Extension-Identifier': id } }).catch(
    () => undefined,
  );
}

process.on('SIGTERM', () => {
  console.log('SIGTERM received');
  if (process.env.IGNORE_SIGTERM === '1') return;
  setTimeout(() => {
    console.log('cleanup done');
    process.exit(0);
  }, 20);
});

export const handler = async () => ({ pid: process.pid });
