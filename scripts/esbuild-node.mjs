// What every esbuild bundle of this project shares (the broker's, the local runtime's, the
// benchmark's and the chaos suite's): one ESM file for Node 24. An ESM bundle that inlines
// CommonJS code (the AWS SDK) calls `require` for Node built-ins; ESM has no `require`, so the
// banner makes one from import.meta.url, taking node:module with `process.getBuiltinModule`
// (an ESM import of it would build its facade too, in every chunk's first line).
import { builtinModules } from 'node:module';

// node:http and node:timers without their ESM facades (issue 25). An ESM `import` of a built-in
// (middy's util takes STATUS_CODES that way, middy's core setTimeout, the AWS SDK's HTTP handler
// `import()`s node:http) builds the module's facade, which reads every export, lazy ones too:
// node:http's WebSocket and its kin load undici, about 20 ms of a cold start's init on Node 24,
// and node:timers' `promises` loads timers/promises, about 1 ms; both found with CPU profiles of
// the cold start (`COLD_PROFILE_DIR`, docs/benchmarks.md; docs/adr/0025). Here such an import gets a module that takes the
// built-in with `process.getBuiltinModule` and exports its plain members and the accessors known
// to be cheap, as a `require` gives them; an import of a lazy member (WebSocket) fails the build.
// `test/build/builtins-without-facade.test.ts` checks both.
const FACADE_FREE = new Set(['http', 'timers']);
const CHEAP_ACCESSORS = new Set(['maxHeaderSize', 'globalAgent']);
export const builtinsWithoutFacade = {
  name: 'builtins-without-facade',
  setup(build) {
    build.onResolve({ filter: /^(node:)?[a-z_]+$/ }, (args) => {
      const name = args.path.replace(/^node:/, '');
      if (!FACADE_FREE.has(name) || args.kind === 'require-call') return undefined;
      if (!builtinModules.includes(name)) return undefined;
      // One module per importer: shared by none, so it never becomes a chunk of its own.
      return {
        path: `node:${name}`,
        namespace: 'builtin-without-facade',
        pluginData: args.importer,
        suffix: `?${args.importer}`,
      };
    });
    build.onLoad({ filter: /.*/, namespace: 'builtin-without-facade' }, async (args) => {
      const module = process.getBuiltinModule(args.path);
      const names = Object.keys(module).filter((name) => {
        const accessor = Object.getOwnPropertyDescriptor(module, name)?.get !== undefined;
        return /^[A-Za-z_$][\w$]*$/.test(name) && (!accessor || CHEAP_ACCESSORS.has(name));
      });
      return {
        contents: [
          `const m = process.getBuiltinModule(${JSON.stringify(args.path)});`,
          'export default m;',
          `export const { ${names.join(', ')} } = m;`,
        ].join('\n'),
        loader: 'js',
      };
    });
  },
};

export const NODE_ESM = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  banner: {
    js: "const require = process.getBuiltinModule('node:module').createRequire(import.meta.url);",
  },
  plugins: [builtinsWithoutFacade],
  // A package's ES modules before its CommonJS (esbuild's default on node is the reverse), as
  // the AWS SDK's docs advise for bundles: the SDK's CommonJS is one file per package, kept
  // whole, every command and every credential provider with it; its ES modules let esbuild drop
  // what is never imported and split what is imported dynamically (the credential providers a
  // Lambda function, with its credentials in the environment, never loads). Issue 25,
  // docs/adr/0026.
  mainFields: ['module', 'main'],
};
