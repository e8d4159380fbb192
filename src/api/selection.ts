/**
 * Character-sheet selection rules against the options catalog (§2.5, §4.2 rules 1–7). Pure
 * functions: the client runs them before submitting, the emulator runs them to refuse.
 */
import type { InputIssue } from './errors.js';
import { SELECTION_CATEGORIES_MAX, type CatalogCategory, type OptionsCatalog, type Tier } from './wire.js';

export interface SelectionCheck {
  issues: InputIssue[];
  /** The selection in catalog order (rule 7), categories and options alike. Valid only without issues. */
  normalized: Record<string, string[]>;
}

/** The category of `key` that applies to `tier` (rule 2: human and animal categories can share a key). */
export function categoryFor(catalog: OptionsCatalog, key: string, tier: Tier): CatalogCategory | undefined {
  return catalog.categories.find((c) => c.key === key && c.tiers.includes(tier));
}

export function checkSelection(catalog: OptionsCatalog, tier: Tier, selection: Record<string, readonly string[]>): SelectionCheck {
  const issues: InputIssue[] = [];
  const keys = Object.keys(selection);
  if (keys.length > SELECTION_CATEGORIES_MAX) {
    issues.push({ path: 'selection', message: `at most ${SELECTION_CATEGORIES_MAX} categories may be selected, got ${keys.length}` });
  }
  const slotOwners = new Map<string, string>();
  for (const key of keys) {
    const path = `selection.${key}`;
    const chosen = selection[key] ?? [];
    const category = categoryFor(catalog, key, tier);
    if (!category) {
      const other = catalog.categories.find((c) => c.key === key);
      issues.push({
        path,
        message: other
          ? `category "${key}" does not apply to tier ${tier} (it is for ${other.tiers.join(', ')})`
          : `category "${key}" is not in the catalog (config_revision ${String(catalog.config_revision)}): stale or unknown key`,
      });
      continue;
    }
    if (chosen.length > category.max) {
      issues.push({ path, message: `category "${key}" allows at most ${category.max} option(s), got ${chosen.length}` });
    }
    const seen = new Set<string>();
    for (const optionKey of chosen) {
      if (seen.has(optionKey)) {
        issues.push({ path, message: `option "${optionKey}" is selected twice in category "${key}"` });
        continue;
      }
      seen.add(optionKey);
      const option = category.options.find((o) => o.key === optionKey);
      if (!option) {
        issues.push({ path, message: `option "${optionKey}" is not in category "${key}": stale or unknown key` });
        continue;
      }
      if (option.tiers !== null && !option.tiers.includes(tier)) {
        issues.push({ path, message: `option "${optionKey}" in category "${key}" is only for ${option.tiers.join(', ')}, not ${tier}` });
      }
      if (option.exclusive && chosen.length > 1) {
        issues.push({ path, message: `option "${optionKey}" in category "${key}" is exclusive and must be selected alone` });
      }
      if (option.slot !== null) {
        const owner = slotOwners.get(option.slot);
        if (owner !== undefined) {
          issues.push({
            path,
            message: `options "${owner}" and "${optionKey}" both fill facial slot "${option.slot}"; select at most one per slot`,
          });
        } else {
          slotOwners.set(option.slot, optionKey);
        }
      }
    }
  }
  return { issues, normalized: issues.length === 0 ? normalizeSelection(catalog, tier, selection) : {} };
}

/** Orders categories and options as the catalog lists them (rule 7). */
export function normalizeSelection(
  catalog: OptionsCatalog,
  tier: Tier,
  selection: Record<string, readonly string[]>,
): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const category of catalog.categories) {
    if (!category.tiers.includes(tier)) continue;
    const chosen = selection[category.key];
    if (!chosen) continue;
    out[category.key] = category.options.map((o) => o.key).filter((k) => chosen.includes(k));
  }
  return out;
}
