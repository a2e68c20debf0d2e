/**
 * The local stand-ins (`npm start`'s broker, the simulator, the Secrets Manager and KMS
 * endpoints) hold real tokens and secrets when a developer runs them with real credentials
 * (docs/guide.md). A web page must not reach them: not by DNS rebinding (its own name made to
 * resolve to 127.0.0.1, so that its requests name it in `Host`), nor by a request of its own
 * (`Origin`). The programs that use them send neither.
 */
import { request } from 'node:http';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LoopbackServer, sendJson, serve } from '../local/loopback.js';

let server: LoopbackServer;
let handled = 0;

beforeAll(async () => {
  server = await serve(
    async (_req, res) => {
      handled += 1;
      sendJson(res, 200, { secret: 'value' });
    },
    { onError: (res) => sendJson(res, 500, {}) },
  );
});
afterAll(() => server.close());

const get = (headers: Record<string, string>) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: server.port, path: '/', method: 'GET', headers },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });

describe('Local loopback servers: requests from web pages', () => {
  it('answer this machine’s programs, which address a loopback host', async () => {
    for (const host of [
      `127.0.0.1:${server.port}`,
      `localhost:${server.port}`,
      '[::1]',
      '127.0.0.2',
      // localhost's subdomains (RFC 6761), a trailing dot, this machine's own name.
      `app.localhost:${server.port}`,
      'localhost.',
      `${hostname()}:${server.port}`,
    ]) {
      expect((await get({ host })).status, host).toBe(200);
    }
    expect(await fetch(server.url).then((r) => r.status)).toBe(200);
  });

  it('refuse a request addressed to another host (DNS rebinding), before their handler runs', async () => {
    const before = handled;
    for (const host of [
      `attacker.example:${server.port}`,
      'localhost.attacker.example',
      '[::2]:80',
    ]) {
      const answer = await get({ host });
      expect(answer.status, host).toBe(403);
      expect(answer.body).toContain('DNS rebinding');
      expect(answer.body).not.toContain('value');
    }
    expect(handled).toBe(before);
  });

  it('refuse a web page’s request, but for a page of the loopback host itself', async () => {
    const host = `127.0.0.1:${server.port}`;
    expect((await get({ host, origin: 'https://attacker.example' })).status).toBe(403);
    expect((await get({ host, origin: 'null' })).status).toBe(403);
    expect((await get({ host, origin: `http://localhost:${server.port}` })).status).toBe(200);
  });
});
