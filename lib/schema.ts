/**
 * Configures the schema library once: zod/mini, the tree-shakable form of zod (28 KiB in the
 * bundle instead of 445, which keeps the cold start close to a bare bundle's), with English
 * messages for its built-in checks. Modules that validate import this file for its effect and
 * `* as z from 'zod/mini'` themselves: re-exporting the namespace from here would make the
 * bundler keep all of zod, every locale included.
 */
import { en } from 'zod/locales';
import { config } from 'zod/mini';

config(en());
