// ESLint: the rules that catch bugs tsc does not (a promise nobody awaits, an await of a
// non-promise, an unused variable), and the layer rule that keeps run/ from importing its views
// and the emulator from importing the runner. Formatting is Prettier's job, not ESLint's.
// `npm run lint`; part of `npm test`.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';
import { ABOVE } from './scripts/layers.mjs';

/**
 * A no-restricted-imports setting refusing relative imports of the given folders of src/. ABOVE is
 * the table scripts/check-cycles.mjs (`npm run cycles`) reads too: this rule flags the import in
 * the editor, the script also sees dynamic imports and resolves every path.
 */
function layerRule(layer, above) {
  return [
    'error',
    {
      patterns: [
        {
          regex: `^(\\.\\./)+(${above.join('|')})(/|$)`,
          message: `src/${layer}/ must not import ${above.map((folder) => `src/${folder}/`).join(', ')} (scripts/layers.mjs).`,
        },
      ],
    },
  ];
}

export default defineConfig(
  {
    ignores: ['dist/', 'node_modules/', 'runs/', 'coverage/', 'bench/results/'],
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    rules: {
      // `_name` marks a value left out on purpose (`const { secret: _, ...rest } = x`, a parameter
      // a signature needs).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      // genpipe matches control characters on purpose: terminal sanitising (util/terminal-text.ts)
      // and the journal's line checks.
      'no-control-regex': 'off',
    },
  },
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['vitest.config.ts', 'vitest.unit.config.ts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // Type-aware rules, the few that find real bugs here: a promise left floating loses its
      // rejection (an unhandled rejection ends the process; an unawaited `expect(...).rejects`
      // passes whatever happens), a promise where a callback's result is ignored, an await of
      // something that is not a promise (a missing call), and a throw or rejection of a non-Error
      // (no stack, no message for the one-sentence error line).
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/only-throw-error': 'error',
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
    },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    languageOptions: { globals: { ...globals.node } },
  },
  {
    // Tests read the service's JSON bodies loosely: a wrong field fails the assertion anyway.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  // Two syntax rules of the house, as data: a file gets the rules whose places it is not exempt from.
  // ESLint keeps only the last no-restricted-syntax setting a file matches, so each set of places
  // gets one block with exactly its rules.
  ...syntaxRuleBlocks(),
  ...Object.entries(ABOVE).map(([layer, above]) => ({
    files: [`src/${layer}/**/*.ts`],
    rules: { 'no-restricted-imports': layerRule(layer, above) },
  })),
);

/**
 * The house's no-restricted-syntax rules, each with the files exempt from it:
 * - settle() (src/run/attempt/settle.ts) is the ledger: the one place an attempt's reserved price is
 *   given back. Any other refund would settle money outside the table whose test holds each row to
 *   the money rules.
 * - A submission's kinds belong to the models (src/models/submission.ts answers what other code may
 *   ask of one). The journal's shape check and the report's compact encoding read the stored
 *   handle's shape, and the service's client and emulator define the kinds.
 */
function syntaxRuleBlocks() {
  const rules = [
    {
      exempt: ['src/run/attempt/settle.ts', 'src/run/attempt/spend.ts'],
      selector: "CallExpression[callee.property.name='refund']",
      message: 'Only settle() (src/run/attempt/settle.ts) refunds a reservation: return an AttemptFate and let it settle.',
    },
    {
      exempt: ['src/models/**', 'src/api/**', 'src/emulator/**', 'src/run/journal/journal-records.ts', 'src/report/instance-lines.ts'],
      selector: "BinaryExpression[left.property.name='kind'][right.value=/^(request|job_set|agent_turn)$/]",
      message: 'Ask a submission through src/models/submission.ts (submissionId, requestIdOf, sessionOf), not by its kind.',
    },
  ];
  const places = [...new Set(rules.flatMap((r) => r.exempt))];
  // One block for the files exempt from no rule, then one per exempt place with the rules it keeps.
  return [
    {
      files: ['src/**/*.ts'],
      ignores: places,
      rules: { 'no-restricted-syntax': ['error', ...rules.map(({ selector, message }) => ({ selector, message }))] },
    },
    ...places.map((place) => ({
      files: [place.endsWith('**') ? `${place}/*.ts` : place],
      rules: {
        'no-restricted-syntax': [
          'error',
          ...rules.filter((r) => !r.exempt.includes(place)).map(({ selector, message }) => ({ selector, message })),
        ],
      },
    })),
  ];
}
