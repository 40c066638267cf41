/**
 * Checks a value against a schema of review-schema.ts's subset of JSON Schema, as ajv 8 does with the options the
 * webhook used to give Fastify's validator (no coercion, no defaults, first error only): the same first violation
 * (keyword, instancePath, params), or undefined. test/webhook/schema-check.test.ts holds it to ajv on generated
 * hostile reviews.
 *
 * Why not ajv: loading ajv and Fastify's compilers, and compiling two schemas, took 7 to 8 MiB of the webhook's
 * resident memory, for a dozen kinds of check. The schema is compiled into closures once, so a review pays
 * for the checks alone; the path of a violation is only built on the way out of a failed check.
 *
 * ajv's order, which decides the first violation: a node's type is checked before anything else when the node
 * has no keyword of its type's group (an `enum` on a string); otherwise the untyped keywords (`const`, `enum`)
 * come first, then the type with its group's keywords (`minLength`; `required`, `additionalProperties`,
 * `properties`; `items`; `maximum`, `minimum`). Nothing here ever changes the value.
 */
import type { SchemaCheck } from './admission.js';
import type { JsonSchema, SchemaViolation } from './review-schema.js';

type SchemaType = NonNullable<JsonSchema['type']>;

/** ajv's type tests; numbers must be finite (its strictNumbers, on by default). */
const IS_TYPE: Readonly<Record<SchemaType | 'number', (value: unknown) => boolean>> = {
  object: (value) => typeof value === 'object' && value !== null && !Array.isArray(value),
  array: (value) => Array.isArray(value),
  string: (value) => typeof value === 'string',
  number: (value) => typeof value === 'number' && Number.isFinite(value),
  integer: (value) => typeof value === 'number' && Number.isFinite(value) && value % 1 === 0,
};

/** The group of keywords that apply to values of one JSON type, as ajv groups them. */
type Group = 'object' | 'array' | 'string' | 'number';

export function compileSchemaCheck(schema: JsonSchema): SchemaCheck {
  const untyped = untypedChecks(schema);
  const typed = typedChecks(schema);
  const { type } = schema;
  if (type === undefined) return all([...untyped, ...typed.map(({ group, check }) => onlyFor(IS_TYPE[group], check))]);
  const typeError = violation('type', { type });
  const isType = IS_TYPE[type];
  const typeCheck: SchemaCheck = (value) => (isType(value) ? undefined : typeError);
  // The node's own type, with its group's keywords behind it (a keyword of another group could never apply).
  // "integer" is no group of its own: ajv always checks it first, then runs the number group's keywords.
  const own = typed.filter(({ group }) => group === (type === 'integer' ? 'number' : type)).map(({ check }) => check);
  return own.length === 0 || type === 'integer' ? all([typeCheck, ...untyped, ...own]) : all([...untyped, typeCheck, ...own]);
}

// Indexed loops below, not for…of: a review runs these some hundred times, and the iterators cost more than the checks.
function all(checks: readonly SchemaCheck[]): SchemaCheck {
  if (checks.length === 1) return checks[0] as SchemaCheck;
  return (value) => {
    for (let index = 0; index < checks.length; index += 1) {
      const found = (checks[index] as SchemaCheck)(value);
      if (found !== undefined) return found;
    }
    return undefined;
  };
}

function onlyFor(isType: (value: unknown) => boolean, check: SchemaCheck): SchemaCheck {
  return (value) => (isType(value) ? check(value) : undefined);
}

function violation(keyword: string, params: Readonly<Record<string, unknown>>, instancePath = ''): SchemaViolation {
  return { keyword, instancePath, params };
}

/** `const` and `enum`, of strings only in review-schema.ts: compared as ajv compares strings, with ===. */
function untypedChecks(schema: JsonSchema): SchemaCheck[] {
  const checks: SchemaCheck[] = [];
  const { const: constant, enum: allowed } = schema;
  if (constant !== undefined) {
    const error = violation('const', { allowedValue: constant });
    checks.push((value) => (value === constant ? undefined : error));
  }
  if (allowed !== undefined) {
    const error = violation('enum', { allowedValues: allowed });
    checks.push((value) => (allowed.includes(value as string) ? undefined : error));
  }
  return checks;
}

interface TypedCheck {
  readonly group: Group;
  /** Runs on values of the group's type only. */
  readonly check: SchemaCheck;
}

function typedChecks(schema: JsonSchema): TypedCheck[] {
  return [...numberChecks(schema), ...stringChecks(schema), ...arrayChecks(schema), ...objectChecks(schema)];
}

function numberChecks({ maximum, minimum }: JsonSchema): TypedCheck[] {
  const checks: TypedCheck[] = [];
  if (maximum !== undefined) {
    const error = violation('maximum', { comparison: '<=', limit: maximum });
    checks.push({ group: 'number', check: (value) => ((value as number) <= maximum ? undefined : error) });
  }
  if (minimum !== undefined) {
    const error = violation('minimum', { comparison: '>=', limit: minimum });
    checks.push({ group: 'number', check: (value) => ((value as number) >= minimum ? undefined : error) });
  }
  return checks;
}

function stringChecks({ minLength }: JsonSchema): TypedCheck[] {
  if (minLength === undefined) return [];
  const error = violation('minLength', { limit: minLength });
  // ajv counts code points, not UTF-16 units; only a string too short by units can be too short by code points.
  const check: SchemaCheck = (value) => {
    const text = value as string;
    return text.length >= 2 * minLength || [...text].length >= minLength ? undefined : error;
  };
  return [{ group: 'string', check }];
}

function arrayChecks({ items }: JsonSchema): TypedCheck[] {
  if (items === undefined) return [];
  const checkItem = compileSchemaCheck(items);
  const check: SchemaCheck = (value) => {
    const list = value as readonly unknown[];
    for (let index = 0; index < list.length; index += 1) {
      const found = checkItem(list[index]);
      if (found !== undefined) return within(String(index), found);
    }
    return undefined;
  };
  return [{ group: 'array', check }];
}

function objectChecks({ required, additionalProperties, properties }: JsonSchema): TypedCheck[] {
  const checks: SchemaCheck[] = [];
  // Present means "not undefined", inherited or own, as ajv reads a property.
  if (required !== undefined) {
    const errors = required.map((name) => violation('required', { missingProperty: name }));
    checks.push((value) => {
      const object = value as Record<string, unknown>;
      for (let index = 0; index < required.length; index += 1) {
        if (object[required[index] as string] === undefined) return errors[index];
      }
      return undefined;
    });
  }
  if (additionalProperties !== undefined) {
    const checkValue = compileSchemaCheck(additionalProperties);
    checks.push((value) => {
      const object = value as Record<string, unknown>;
      for (const key in object) {
        const found = checkValue(object[key]);
        if (found !== undefined) return within(key, found);
      }
      return undefined;
    });
  }
  if (properties !== undefined) {
    const names = Object.keys(properties);
    const checkProperty = names.map((name) => compileSchemaCheck(properties[name] as JsonSchema));
    checks.push((value) => {
      const object = value as Record<string, unknown>;
      for (let index = 0; index < names.length; index += 1) {
        const name = names[index] as string;
        const property = object[name];
        if (property === undefined) continue;
        const found = (checkProperty[index] as SchemaCheck)(property);
        if (found !== undefined) return within(name, found);
      }
      return undefined;
    });
  }
  return checks.map((check) => ({ group: 'object', check }));
}

/** The violation of a child, seen from its parent: the child's key (RFC 6901-escaped) before its path. */
function within(key: string, found: SchemaViolation): SchemaViolation {
  const escaped = key.replaceAll('~', '~0').replaceAll('/', '~1');
  return { ...found, instancePath: `/${escaped}${found.instancePath}` };
}
