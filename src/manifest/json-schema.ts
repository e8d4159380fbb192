/** The manifest's JSON Schema, generated from the zod schema, for editors (yaml-language-server). */
import * as z from 'zod';
import { Manifest } from './schema.js';

export function manifestJsonSchema(): string {
  const schema = z.toJSONSchema(Manifest, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  const document = {
    ...schema,
    $id: 'https://genpipe.dev/schemas/manifest.schema.json',
    title: 'genpipe pipeline manifest',
    description: 'Generated from src/manifest/schema.ts by `npm run schemas`; do not edit by hand.',
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}
