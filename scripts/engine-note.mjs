// postinstall: one line when npm itself ran on an older Node than the pinned node@24 devDependency
// that every npm script runs on, saying why npm printed no engine warnings (.npmrc).
import { readFileSync } from 'node:fs';

const npmNode = /node\/v(\d+)\.\S*/.exec(process.env.npm_config_user_agent ?? '');
const pinned = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
  .devDependencies.node;
if (npmNode && Number(npmNode[1]) < Number(pinned.split('.')[0])) {
  console.log(
    `npm ran on Node ${npmNode[0].slice(5)}; its engine warnings are off (.npmrc): every npm script runs on the pinned node ${pinned}, against which test/engines.test.ts checks every package's engines.`,
  );
}
