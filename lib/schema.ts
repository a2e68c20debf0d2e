/**
 * The schema library, configured once: zod/mini, the tree-shakable form of zod (28 KiB in the
 * bundle instead of 445, which keeps the cold start close to a bare bundle's), with English
 * messages for the built-in checks. Import `z` from here, never from 'zod' directly.
 */
import { en } from 'zod/locales';
import * as z from 'zod/mini';

z.config(en());

export { z };
